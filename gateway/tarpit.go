package gateway

// The tarpit slows password guessing per source address (issue 13 point
// 5). A host with no failures may have tarpitFreeParallel attempts checked
// at once; beyond that, and after any failure, its attempts are spaced at
// least tarpitBase apart; after failures, each
// attempt waits the host's penalty (tarpitBase, doubling per failure, up
// to tarpitMax) before its password is even checked, so one host cannot buy
// more checks by opening more connections. The wait is a timer on the
// connection's own reader goroutine: nothing spins. Every attempt still gets
// its CONNACK. A host whose queue of waiting attempts is longer than
// tarpitQueueMax is answered at once with "server busy", unverified.
//
// A success clears only the failures of the user that succeeded: a
// sensor that mistyped its password is not held back, but an attacker who
// owns one valid login cannot wipe the penalty of its guesses at another
// user's password. Hosts behind one NAT share a tarpit; on a sensor LAN they
// rarely do.

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
	// tarpitFreeParallel attempts from a host with no failures are checked
	// at once; more in parallel are spaced like guesses.
	tarpitFreeParallel = 4
)

type tarpit struct {
	mu    sync.Mutex
	hosts map[string]*guesser
}

// tarpitUsersMax bounds the per-user failure counts kept per host; failures
// of further user names are kept under "" and cleared by no success.
const tarpitUsersMax = 16

type guesser struct {
	fails   map[string]int // failures by user name
	total   int            // sum of fails
	pending int            // attempts admitted and not yet decided
	next    time.Time      // the earliest time this host's next attempt is checked
	last    time.Time
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

// admit schedules an attempt from host: it returns how long to wait before
// checking its password, and busy when the host's queue is too long to
// check it at all. Unless busy, the caller reports the outcome with failed
// or succeeded (or abandoned).
func (t *tarpit) admit(host string, now time.Time) (wait time.Duration, busy bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.hosts[host]
	if g != nil && g.pending == 0 && now.Sub(g.last) > tarpitForget {
		delete(t.hosts, host)
		g = nil
	}
	if g == nil {
		g = t.add(host, now)
	}
	if g.total == 0 && g.pending < tarpitFreeParallel && !g.next.After(now) {
		// A host with no failures may log in a few clients at once
		// (a gateway restart reconnecting several local apps).
		g.pending++
		g.last = now
		if g.pending == tarpitFreeParallel {
			g.next = now.Add(tarpitBase) // the next one is spaced
		}
		return 0, false
	}
	slot := now
	if g.next.After(now) {
		slot = g.next
	}
	if slot.Sub(now) > tarpitQueueMax {
		return 0, true
	}
	g.next = slot.Add(max(penalty(g.total), tarpitBase)) // at most one check per tarpitBase per host
	g.pending++
	g.last = now
	return slot.Sub(now), false
}

// add makes host's entry. Caller holds t.mu.
func (t *tarpit) add(host string, now time.Time) *guesser {
	if t.hosts == nil {
		t.hosts = make(map[string]*guesser)
	}
	if len(t.hosts) >= tarpitHostsMax {
		t.prune(now)
	}
	g := &guesser{last: now}
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
	g.pending = max(0, g.pending-1)
	if g.fails == nil {
		g.fails = make(map[string]int)
	}
	if _, ok := g.fails[user]; !ok && len(g.fails) >= tarpitUsersMax {
		user = ""
	}
	g.fails[user]++
	g.total++
	g.last = now
	if next := now.Add(penalty(g.total)); next.After(g.next) {
		g.next = next
	}
}

// succeeded records a successful login of user from host: that user's
// failures are forgotten, other users' stay.
func (t *tarpit) succeeded(host, user string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.hosts[host]
	if g == nil {
		return
	}
	g.pending = max(0, g.pending-1)
	if user != "" {
		g.total -= g.fails[user]
		delete(g.fails, user)
	}
	if g.total == 0 && g.pending == 0 {
		delete(t.hosts, host)
	}
}

// abandoned records an admitted attempt that was never decided (the
// server stopped while it waited).
func (t *tarpit) abandoned(host string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if g := t.hosts[host]; g != nil {
		g.pending = max(0, g.pending-1)
	}
}

// prune drops idle hosts, or all of them when none is idle (a flood from
// more addresses than tarpitHostsMax gets no memory, only the verifier's
// bound). Caller holds t.mu.
func (t *tarpit) prune(now time.Time) {
	for h, g := range t.hosts {
		if g.pending == 0 && now.Sub(g.last) > tarpitForget {
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
