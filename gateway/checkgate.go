package gateway

// The check gate orders password checks. A check costs a bcrypt
// comparison (tens of milliseconds of a core, more on a busy machine),
// and only a few run at once; a plain queue of them serves whoever came
// first, so one address's flood of guesses, each admitted by the tarpit
// in its own lane, made the right password of a user nobody was guessing
// wait behind all of them, from that address and from others. The gate
// lets through, whenever a check ends, the waiting check that most
// deserves to go first:
//
//  1. one for a lane with no failed login (a user nobody is guessing from
//     that address) before one for a lane with failures (a guessed user,
//     or the shared lane);
//  2. then the address whose last check went through longest ago, so
//     each address gets its turn (an address with none yet goes first);
//  3. then the one that came first.
//
// So a right password that nobody is guessing waits for the checks
// already running and at most one from each other address that also
// has a check for an unguessed lane waiting; guesses wait for each other.
// The gate changes the order of checks, not their number: what the tarpit
// admits is what gets checked.

import (
	"runtime"
	"sync"
)

// checkSlots is how many password checks run at once: as many as the
// password verifier (gateway/auth) runs, half the cores, at least one, so
// that the order is decided here and not in the verifier's own queue.
func checkSlots() int { return max(1, runtime.NumCPU()/2) }

// checkGate lets password checks through checkSlots at a time, in the
// order above.
type checkGate struct {
	mu      sync.Mutex
	slots   int // 0 until first use: checkSlots()
	running int
	seq     uint64
	waiting []*checkTicket
	// turn is when (in seq) each address with checks waiting last had
	// one let through; an address without an entry has had none since
	// it last had nothing waiting.
	turn map[string]uint64
}

type checkTicket struct {
	host string
	// isGuessed reports whether its lane has failed logins now: asked
	// each time the gate picks, since a lane's first checks come in
	// together before any of them failed, and those still waiting when
	// one fails are guesses from then on.
	isGuessed func() bool
	guessed   bool // isGuessed, as of the gate's current pick
	seq       uint64
	ready     chan struct{} // closed when it may run
}

// enter waits until the check may run; it reports false, without
// running, when done is closed first (the server is stopping). After a
// true, the caller calls leave when the check is over.
func (g *checkGate) enter(host string, guessed func() bool, done <-chan struct{}) bool {
	g.mu.Lock()
	if g.slots == 0 {
		g.slots = checkSlots()
	}
	g.seq++
	if g.running < g.slots && len(g.waiting) == 0 {
		g.running++
		g.mu.Unlock()
		return true
	}
	t := &checkTicket{host: host, isGuessed: guessed, seq: g.seq, ready: make(chan struct{})}
	g.waiting = append(g.waiting, t)
	g.mu.Unlock()
	select {
	case <-t.ready:
		return true
	case <-done:
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-t.ready: // let through meanwhile: give the slot on
		g.running--
		g.next()
		return false
	default:
	}
	g.drop(t)
	return false
}

// leave ends a check that enter let through.
func (g *checkGate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running--
	g.next()
}

// next lets waiting checks through while slots are free. Caller holds
// g.mu (and takes the tarpit's lock through isGuessed: the tarpit never
// takes the gate's).
func (g *checkGate) next() {
	if g.running < g.slots {
		for _, t := range g.waiting {
			t.guessed = t.isGuessed()
		}
	}
	for g.running < g.slots && len(g.waiting) > 0 {
		best := 0
		for i, t := range g.waiting[1:] {
			if g.before(t, g.waiting[best]) {
				best = i + 1
			}
		}
		t := g.waiting[best]
		g.drop(t)
		if g.turn == nil {
			g.turn = make(map[string]uint64)
		}
		if g.waits(t.host) {
			g.turn[t.host] = g.seq
		}
		g.running++
		close(t.ready)
	}
}

// before reports whether a goes before b. Caller holds g.mu.
func (g *checkGate) before(a, b *checkTicket) bool {
	if a.guessed != b.guessed {
		return !a.guessed
	}
	if ta, tb := g.turn[a.host], g.turn[b.host]; ta != tb {
		return ta < tb
	}
	return a.seq < b.seq
}

// drop removes t from the waiting checks, and its address's turn when
// nothing of that address waits any more. Caller holds g.mu.
func (g *checkGate) drop(t *checkTicket) {
	for i, w := range g.waiting {
		if w == t {
			g.waiting = append(g.waiting[:i], g.waiting[i+1:]...)
			break
		}
	}
	if !g.waits(t.host) {
		delete(g.turn, t.host)
	}
}

// waits reports whether a check from host is waiting. Caller holds g.mu.
func (g *checkGate) waits(host string) bool {
	for _, w := range g.waiting {
		if w.host == host {
			return true
		}
	}
	return false
}
