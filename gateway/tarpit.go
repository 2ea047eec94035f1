package gateway

// The tarpit slows password guessing per source address and user name.
// Each address keeps a lane per user name it logs in as, and the lane's
// schedule holds when a password is checked, not when a connection comes:
// an attempt waits in its lane's queue, first come first, until the lane
// allows a check. A lane with no failures lets tarpitFreeParallel checks
// run at once, further ones tarpitBase apart; a lane with failures lets
// one check run at a time, the next penalty(fails) after the last failure
// (tarpitBase, doubling per failure, up to tarpitMax). So one address
// cannot buy more checks of a user's password by opening more
// connections: however many wait, the lane makes the same checks. The
// wait is a timer on the connection's own reader goroutine: nothing
// spins. Every attempt still gets its CONNACK. An attempt that would wait
// longer than tarpitQueueMax if every check ahead of it failed is
// answered at once with "server busy", unverified, and one still waiting
// after tarpitQueueMax is answered so then.
//
// Lanes keep the penalty on the guessed user: another user logging in
// from the same address (every local program on 127.0.0.1, every sensor
// behind one NAT) is not held back by a flood of guesses at someone
// else's password. An address has at most tarpitUsersMax lanes; attempts
// for further user names share one more lane, so guessing at many user
// names does not buy more checks either. A success clears only its own
// lane's failures (a shared lane's stay): an attacker who owns one valid
// login cannot wipe the penalty of its guesses at another user's
// password. A login with a credential verified lately skips the tarpit
// altogether (connect.go). The checks the tarpit lets through then wait
// their turn at the check gate (checkgate.go), where a lane nobody is
// guessing goes before the guesses.

import (
	"net"
	"sync"
	"time"
)

const (
	tarpitBase     = 100 * time.Millisecond
	tarpitMax      = 5 * time.Second
	tarpitQueueMax = 30 * time.Second
	tarpitForget   = 10 * time.Minute // a host idle this long starts over
	tarpitHostsMax = 4096
	// tarpitFreeParallel attempts in a lane with no failures are checked
	// at once; more in parallel are spaced like guesses.
	tarpitFreeParallel = 4
	// tarpitUsersMax bounds the lanes of one address; attempts for
	// further user names share the lane of tarpitShared.
	tarpitUsersMax = 16
)

// tarpitShared is the key of the lane attempts share when an address has
// tarpitUsersMax lanes. No user name is it (MQTT strings hold no U+0000
// [MQTT-1.5.4-2]).
const tarpitShared = "\x00shared"

type tarpit struct {
	mu    sync.Mutex
	hosts map[string]*guesser

	checks checkGate // orders the checks the tarpit lets through (checkgate.go)
}

// guesser is one source address.
type guesser struct {
	lanes map[string]*lane // by user name (or tarpitShared)
	last  time.Time
}

// lane is one user name's attempts from one address. Its schedule holds
// at check time: an attempt waits in the lane's queue, in order, and is
// let through only when the lane allows a check then, so the number of
// checks does not depend on how many connections wait.
type lane struct {
	key     string
	fails   int
	running int           // checks let through and not yet decided
	next    time.Time     // the earliest time the lane's next check starts
	queue   []*laneTicket // attempts waiting, first come first
	changed chan struct{} // closed (and replaced) when running, fails or queue change
}

// laneTicket is one attempt waiting in, or let through, a lane.
type laneTicket struct {
	host     string
	l        *lane
	deadline time.Time // answered "server busy" if still waiting then
	through  bool      // let through: its check runs or ran
	gone     bool      // out of the queue, never to be let through
}

func penalty(fails int) time.Duration {
	if fails <= 0 {
		return 0
	}
	if fails > 16 {
		return tarpitMax
	}
	return min(tarpitBase<<(fails-1), tarpitMax)
}

// lane returns user's lane, made if need be (the shared one when the
// address has all its lanes). Caller holds t.mu.
func (g *guesser) lane(user string) *lane {
	if l := g.lanes[user]; l != nil {
		return l
	}
	if len(g.lanes) >= tarpitUsersMax {
		user = tarpitShared
		if l := g.lanes[user]; l != nil {
			return l
		}
	}
	l := &lane{key: user, changed: make(chan struct{})}
	g.lanes[user] = l
	return l
}

// busy reports whether the lane has attempts let through or waiting.
func (l *lane) busy() bool { return l.running > 0 || len(l.queue) > 0 }

// notify wakes the attempts waiting in the lane. Caller holds t.mu.
func (l *lane) notify() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// idle reports whether the address has nothing to remember.
func (g *guesser) idle() bool {
	for _, l := range g.lanes {
		if l.fails > 0 || l.busy() {
			return false
		}
	}
	return true
}

func (g *guesser) pending() bool {
	for _, l := range g.lanes {
		if l.busy() {
			return true
		}
	}
	return false
}

// queueWait is how long an attempt joining l now would wait for its
// check if every check ahead of it failed: the lane's next slot, then a
// penalty per check running or waiting ahead. Caller holds t.mu.
func (l *lane) queueWait(now time.Time) time.Duration {
	w := max(l.next.Sub(now), 0)
	if l.fails == 0 {
		return w + time.Duration(len(l.queue))*tarpitBase
	}
	f := l.fails
	for range l.running + len(l.queue) {
		f++
		w += penalty(f)
	}
	return w
}

// admit puts an attempt by user from host in its lane's queue, or
// reports busy when it would wait there longer than tarpitQueueMax (it is
// then not queued). The caller waits with turn until the ticket is let
// through, then reports the outcome with failed or succeeded; or gives it
// up with abandoned.
func (t *tarpit) admit(host, user string, now time.Time) (tk *laneTicket, busy bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.hosts[host]
	if g != nil && !g.pending() && now.Sub(g.last) > tarpitForget {
		delete(t.hosts, host)
		g = nil
	}
	if g == nil {
		g = t.add(host, now)
	}
	l := g.lane(user)
	if l.queueWait(now) > tarpitQueueMax {
		return nil, true
	}
	tk = &laneTicket{host: host, l: l, deadline: now.Add(tarpitQueueMax)}
	l.queue = append(l.queue, tk)
	g.last = now
	return tk, false
}

// turn reports whether tk's check may start now; if it may, tk is let
// through (counted as running in its lane). Otherwise it reports busy
// when tk waited its deadline out (tk is then out of the queue), or how
// long to wait at most and a channel closed when the lane changes, after
// which the caller asks again. A lane with no failures lets through
// tarpitFreeParallel checks at once, the next one tarpitBase after the
// last of those; a lane with failures one check at a time, penalty(fails)
// after its last failure. Either way only the first in the queue.
func (t *tarpit) turn(tk *laneTicket, now time.Time) (ok, busy bool, wait time.Duration, changed <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := tk.l
	if tk.through {
		return true, false, 0, nil
	}
	if tk.gone || !now.Before(tk.deadline) {
		tk.gone = true
		l.remove(tk)
		l.notify()
		return false, true, 0, nil
	}
	wait = tk.deadline.Sub(now)
	if l.queue[0] != tk {
		return false, false, wait, l.changed
	}
	room := l.running < tarpitFreeParallel
	if l.fails > 0 {
		room = l.running == 0
	}
	if !room {
		return false, false, wait, l.changed
	}
	if l.next.After(now) {
		return false, false, min(wait, l.next.Sub(now)), l.changed
	}
	l.remove(tk)
	tk.through = true
	l.running++
	if l.fails == 0 && l.running >= tarpitFreeParallel {
		l.next = now.Add(tarpitBase) // beyond the first few, checks are spaced
	}
	l.notify()
	return true, false, 0, nil
}

// remove takes tk out of l's queue. Caller holds t.mu.
func (l *lane) remove(tk *laneTicket) {
	for i, w := range l.queue {
		if w == tk {
			l.queue = append(l.queue[:i], l.queue[i+1:]...)
			return
		}
	}
}

// guessed reports whether tk's lane has failed logins.
func (t *tarpit) guessed(tk *laneTicket) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return tk.l.fails > 0
}

// add makes host's entry. Caller holds t.mu.
func (t *tarpit) add(host string, now time.Time) *guesser {
	if t.hosts == nil {
		t.hosts = make(map[string]*guesser)
	}
	if len(t.hosts) >= tarpitHostsMax {
		t.prune(now)
	}
	g := &guesser{last: now, lanes: make(map[string]*lane)}
	t.hosts[host] = g
	return g
}

// failed records that tk's check failed: the lane's next check waits
// penalty(fails) from now.
func (t *tarpit) failed(tk *laneTicket, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := tk.l
	l.running = max(0, l.running-1)
	l.fails++
	if g := t.hosts[tk.host]; g != nil {
		g.last = now
	}
	if next := now.Add(penalty(l.fails)); next.After(l.next) {
		l.next = next
	}
	l.notify()
}

// succeeded records that tk's check succeeded: its user's failures are
// forgotten; a shared lane's stay, and so do other users'.
func (t *tarpit) succeeded(tk *laneTicket) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := tk.l
	l.running = max(0, l.running-1)
	if l.key != tarpitShared {
		l.fails = 0
	}
	l.notify()
	t.forget(tk.host, l)
}

// abandoned records that tk was given up (its connection closed, or the
// server stopped) before its check was decided.
func (t *tarpit) abandoned(tk *laneTicket) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := tk.l
	if tk.through {
		l.running = max(0, l.running-1)
	} else {
		tk.gone = true
		l.remove(tk)
	}
	l.notify()
	t.forget(tk.host, l)
}

// forget drops l, and its address, when there is nothing to remember of
// them. Caller holds t.mu.
func (t *tarpit) forget(host string, l *lane) {
	g := t.hosts[host]
	if g == nil || g.lanes[l.key] != l || l.fails > 0 || l.busy() {
		return
	}
	delete(g.lanes, l.key)
	if g.idle() {
		delete(t.hosts, host)
	}
}

// prune drops idle hosts, or all of them when none is idle (a flood from
// more addresses than tarpitHostsMax gets no memory, only the verifier's
// bound). Caller holds t.mu.
func (t *tarpit) prune(now time.Time) {
	for h, g := range t.hosts {
		if !g.pending() && now.Sub(g.last) > tarpitForget {
			delete(t.hosts, h)
		}
	}
	if len(t.hosts) >= tarpitHostsMax {
		clear(t.hosts)
	}
}

// hostOf is the address part of a remote address (the tarpit's key).
func hostOf(a net.Addr) string {
	if a == nil {
		return ""
	}
	h, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return h
}
