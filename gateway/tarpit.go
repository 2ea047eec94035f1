package gateway

// The tarpit slows password guessing per source address and user name
// (issue 13 point 5). Each address keeps a lane per user name it logs in
// as: a lane with no failures may have tarpitFreeParallel attempts checked
// at once; beyond that, and after any failure, its attempts are spaced at
// least tarpitBase apart; after failures, each attempt waits the lane's
// penalty (tarpitBase, doubling per failure, up to tarpitMax) before its
// password is even checked, so one address cannot buy more checks of a
// user's password by opening more connections. The wait is a timer on the
// connection's own reader goroutine: nothing spins. Every attempt still
// gets its CONNACK. A lane whose queue of waiting attempts is longer than
// tarpitQueueMax is answered at once with "server busy", unverified.
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
// altogether (connect.go). The checks the tarpit admits then wait their
// turn at the check gate (checkgate.go), where a lane nobody is guessing
// goes before the guesses.

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

	checks checkGate // orders the checks the tarpit admits (checkgate.go)
}

// guesser is one source address.
type guesser struct {
	lanes map[string]*lane // by user name
	last  time.Time
}

// lane is one user name's attempts from one address.
type lane struct {
	fails   int
	pending int       // attempts admitted and not yet decided
	next    time.Time // the earliest time this lane's next attempt is checked
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
	l := &lane{}
	g.lanes[user] = l
	return l
}

// idle reports whether the address has nothing to remember.
func (g *guesser) idle() bool {
	for _, l := range g.lanes {
		if l.fails > 0 || l.pending > 0 {
			return false
		}
	}
	return true
}

func (g *guesser) pending() bool {
	for _, l := range g.lanes {
		if l.pending > 0 {
			return true
		}
	}
	return false
}

// admit schedules an attempt by user from host: it returns how long to
// wait before checking its password, and busy when the lane's queue is too
// long to check it at all. Unless busy, the caller reports the outcome
// with failed or succeeded (or abandoned).
func (t *tarpit) admit(host, user string, now time.Time) (wait time.Duration, busy bool) {
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
	if l.fails == 0 && l.pending < tarpitFreeParallel && !l.next.After(now) {
		// A lane with no failures may log in a few clients at once
		// (a gateway restart reconnecting several local apps).
		l.pending++
		g.last = now
		if l.pending == tarpitFreeParallel {
			l.next = now.Add(tarpitBase) // the next one is spaced
		}
		return 0, false
	}
	slot := now
	if l.next.After(now) {
		slot = l.next
	}
	if slot.Sub(now) > tarpitQueueMax {
		return 0, true
	}
	l.next = slot.Add(max(penalty(l.fails), tarpitBase)) // at most one check per tarpitBase per lane
	l.pending++
	g.last = now
	return slot.Sub(now), false
}

// guessed reports whether user's lane at host (the shared one if user has
// none and the address has all its lanes) has failed logins.
func (t *tarpit) guessed(host, user string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.hosts[host]
	if g == nil {
		return false
	}
	l := g.lanes[user]
	if l == nil && len(g.lanes) >= tarpitUsersMax {
		l = g.lanes[tarpitShared]
	}
	return l != nil && l.fails > 0
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

// failed records a failed login of user from host.
func (t *tarpit) failed(host, user string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.hosts[host]
	if g == nil {
		g = t.add(host, now)
	}
	l := g.lane(user)
	l.pending = max(0, l.pending-1)
	l.fails++
	g.last = now
	if next := now.Add(penalty(l.fails)); next.After(l.next) {
		l.next = next
	}
}

// succeeded records a successful login of user from host: that user's
// failures are forgotten, other users' (and a shared lane's) stay.
func (t *tarpit) succeeded(host, user string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.hosts[host]
	if g == nil {
		return
	}
	if l := g.lanes[user]; l != nil {
		delete(g.lanes, user)
	} else if l := g.lanes[tarpitShared]; l != nil {
		l.pending = max(0, l.pending-1)
	}
	if g.idle() {
		delete(t.hosts, host)
	}
}

// abandoned records an admitted attempt that was never decided (the
// server stopped while it waited).
func (t *tarpit) abandoned(host, user string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if g := t.hosts[host]; g != nil {
		l := g.lanes[user]
		if l == nil {
			l = g.lanes[tarpitShared]
		}
		if l != nil {
			l.pending = max(0, l.pending-1)
		}
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
