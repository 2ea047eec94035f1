package gateway

// The tarpit slows password guessing per source address (issue 13 point
// 5). After a failed login from a host, that host's next attempt waits
// before its password is even checked, twice as long after every further
// failure (tarpitBase up to tarpitMax), and attempts made in parallel are
// spaced out one penalty apart, so one host cannot buy more checks by
// opening more connections. The wait is a timer on the connection's own
// reader goroutine: nothing spins. Every attempt still gets its CONNACK.
// A host whose queue of waiting attempts is longer than tarpitQueueMax is
// answered at once with "server busy", unverified. A success forgets the
// host. Hosts behind one NAT share a tarpit; on a sensor LAN they rarely do.

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
)

type tarpit struct {
	mu    sync.Mutex
	hosts map[string]*guesser
}

type guesser struct {
	fails int
	next  time.Time // the earliest time this host's next attempt is checked
	last  time.Time
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
// check it at all.
func (t *tarpit) admit(host string, now time.Time) (wait time.Duration, busy bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.hosts[host]
	if g == nil || g.fails == 0 {
		return 0, false
	}
	if now.Sub(g.last) > tarpitForget {
		delete(t.hosts, host)
		return 0, false
	}
	slot := now
	if g.next.After(now) {
		slot = g.next
	}
	if slot.Sub(now) > tarpitQueueMax {
		return 0, true
	}
	g.next = slot.Add(penalty(g.fails))
	return slot.Sub(now), false
}

// failed records a failed login from host.
func (t *tarpit) failed(host string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.hosts[host]
	if g == nil {
		if t.hosts == nil {
			t.hosts = make(map[string]*guesser)
		}
		if len(t.hosts) >= tarpitHostsMax {
			t.prune(now)
		}
		g = &guesser{}
		t.hosts[host] = g
	}
	g.fails++
	g.last = now
	if next := now.Add(penalty(g.fails)); next.After(g.next) {
		g.next = next
	}
}

// succeeded forgets host: its next attempt is checked at once.
func (t *tarpit) succeeded(host string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.hosts, host)
}

// prune drops idle hosts, or all of them when none is idle (a flood from
// more addresses than tarpitHostsMax gets no memory, only the verifier's
// bound). Caller holds t.mu.
func (t *tarpit) prune(now time.Time) {
	for h, g := range t.hosts {
		if now.Sub(g.last) > tarpitForget {
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
