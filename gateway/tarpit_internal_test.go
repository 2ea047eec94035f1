package gateway

import (
	"fmt"
	"testing"
	"time"
)

// floodSim drives the tarpit's clock through a flood: n connections from
// one address guess user's password, each reconnecting the moment it is
// answered (at once when "server busy", checkTook after its check
// starts when checked, always wrongly), for window. It returns the start
// times of the checks (offsets from the start), how many attempts were
// answered busy, and the longest a let-through attempt waited.
func floodSim(tp *tarpit, n int, user string, checkTook, window time.Duration) (checks []time.Duration, busy int, longest time.Duration) {
	const host = "10.0.0.9"
	t0 := time.Unix(1_000_000, 0)
	type conn struct {
		tk    *laneTicket
		since time.Time
		ends  time.Time // when its running check ends; zero if none
	}
	conns := make([]*conn, n)
	for i := range conns {
		conns[i] = &conn{}
	}
	for now := t0; now.Sub(t0) <= window; {
		next := t0.Add(window + time.Nanosecond)
		for changed := true; changed; {
			changed = false
			for _, c := range conns {
				if !c.ends.IsZero() && !c.ends.After(now) {
					tp.failed(c.tk, c.ends)
					c.tk, c.ends, changed = nil, time.Time{}, true
				}
				if c.tk == nil {
					tk, b := tp.admit(host, user, now)
					if b {
						busy++
						continue // retries at the next event
					}
					c.tk, c.since, changed = tk, now, true
				}
				if c.ends.IsZero() {
					ok, b, wait, _ := tp.turn(c.tk, now)
					switch {
					case ok:
						checks = append(checks, now.Sub(t0))
						longest = max(longest, now.Sub(c.since))
						c.ends, changed = now.Add(checkTook), true
					case b:
						busy++
						c.tk, changed = nil, true
					default:
						if at := now.Add(wait); at.Before(next) {
							next = at
						}
					}
				}
			}
		}
		for _, c := range conns {
			if !c.ends.IsZero() && c.ends.Before(next) {
				next = c.ends
			}
		}
		now = next
	}
	return checks, busy, longest
}

// TestTarpitChecksDoNotGrowWithConnections: 1, 4, 8, 32 or 64 connections
// guessing one user's password from one address, checks taking 50 ms,
// get exactly the checks of docs/security.md's schedule in 5 s: at 0
// (four at once, or one), then each one penalty after the last failure:
// 6 checks; in 12 s, 8. The queue is bounded: nothing waits longer than
// tarpitQueueMax, and a big flood is answered "server busy".
func TestTarpitChecksDoNotGrowWithConnections(t *testing.T) {
	for _, n := range []int{1, 4, 8, 32, 64} {
		var tp tarpit
		checks, busy, longest := floodSim(&tp, n, "mallory", 50*time.Millisecond, 5*time.Second)
		if len(checks) != 6 {
			t.Errorf("%d connections: %d checks in 5 s at %v, want 6", n, len(checks), checks)
		}
		if longest > tarpitQueueMax {
			t.Errorf("%d connections: an attempt waited %v for its check", n, longest)
		}
		if n >= 32 && busy == 0 {
			t.Errorf("%d connections: none answered server busy", n)
		}
		var tp2 tarpit
		if checks, _, _ := floodSim(&tp2, n, "mallory", 50*time.Millisecond, 12*time.Second); len(checks) != 8 {
			t.Errorf("%d connections: %d checks in 12 s at %v, want 8", n, len(checks), checks)
		}
	}
	// A lane that has failed seven times: one check per 5 s, whatever n.
	for _, n := range []int{1, 32} {
		var tp tarpit
		checks, _, _ := floodSim(&tp, n, "mallory", 50*time.Millisecond, 60*time.Second)
		for i := 8; i < len(checks); i++ {
			if d := checks[i] - checks[i-1]; d < tarpitMax {
				t.Errorf("%d connections: checks %d and %d %v apart, want at least %v", n, i, i+1, d, tarpitMax)
			}
		}
	}
}

// TestTarpitAbandonedNeverChecked: an attempt given up while it waits
// (its connection closed) leaves the queue: it is never let through, and
// the one behind it takes its place.
func TestTarpitAbandonedNeverChecked(t *testing.T) {
	var tp tarpit
	t0 := time.Unix(1_000_000, 0)
	const h = "10.0.0.9"
	first, _ := tp.admit(h, "bob", t0)
	if ok, _, _, _ := tp.turn(first, t0); !ok {
		t.Fatal("a lone first attempt is not let through")
	}
	tp.failed(first, t0)
	gone, _ := tp.admit(h, "bob", t0)
	behind, _ := tp.admit(h, "bob", t0)
	tp.abandoned(gone)
	later := t0.Add(penalty(1))
	if ok, _, _, _ := tp.turn(behind, later); !ok {
		t.Fatal("the attempt behind an abandoned one is not let through at the lane's next slot")
	}
	if ok, _, _, _ := tp.turn(gone, later); ok {
		t.Fatal("an abandoned attempt was let through")
	}
}

// TestTarpitSchedule drives the tarpit's clock: a lone first attempt
// waits nothing; after n failures the next check waits the penalty from
// the last failure, one at a time; an attempt that would wait past
// tarpitQueueMax is answered busy; a success clears its own user's
// failures; a long silence forgets the host.
func TestTarpitSchedule(t *testing.T) {
	var tp tarpit
	t0 := time.Unix(1_000_000, 0)
	const h = "10.0.0.9"
	tk, busy := tp.admit(h, "alice", t0)
	if ok, _, _, _ := tp.turn(tk, t0); busy || !ok {
		t.Fatalf("first attempt: busy %v, let through %v", busy, ok)
	}
	tp.failed(tk, t0)
	for i := range 2 {
		now := t0.Add(time.Duration(i+1) * time.Second)
		tk, _ := tp.admit(h, "alice", now)
		tp.turn(tk, now)
		tp.failed(tk, now)
	}
	// 3 failures, the last at t0+2s: the next check at t0+2.4s, the one
	// after it not before the first has failed.
	at := t0.Add(2 * time.Second)
	w1, _ := tp.admit(h, "alice", at)
	w2, _ := tp.admit(h, "alice", at)
	if ok, _, wait, _ := tp.turn(w1, at); ok || wait != 400*time.Millisecond {
		t.Fatalf("after 3 failures: let through %v, wait %v, want a wait of 400ms", ok, wait)
	}
	at = at.Add(400 * time.Millisecond)
	if ok, _, _, _ := tp.turn(w2, at); ok {
		t.Fatal("the second in the queue went before the first")
	}
	if ok, _, _, _ := tp.turn(w1, at); !ok {
		t.Fatal("the first in the queue is not let through at its slot")
	}
	if ok, _, _, _ := tp.turn(w2, at.Add(time.Second)); ok {
		t.Fatal("a second check ran while the lane's check was running")
	}
	tp.failed(w1, at)
	if ok, _, wait, _ := tp.turn(w2, at); ok || wait != penalty(4) {
		t.Fatalf("after 4 failures: let through %v, wait %v, want %v", ok, wait, penalty(4))
	}
	tp.abandoned(w2)
	if tk, _ := tp.admit("10.0.0.10", "alice", at); !letThrough(&tp, tk, at) {
		t.Fatal("another host waits")
	}
	busy = false
	for i := 0; i < 40 && !busy; i++ {
		_, busy = tp.admit(h, "alice", at)
	}
	if !busy {
		t.Fatalf("a queue past %v is not answered busy", tarpitQueueMax)
	}
	if tk, _ := tp.admit(h, "carol", at); !letThrough(&tp, tk, at) {
		t.Fatal("another user from the flooding address waits")
	} else {
		tp.succeeded(tk)
	}
	later := at.Add(time.Hour)
	tp.failed(&laneTicket{host: "10.0.0.11", l: tp.hosts["10.0.0.10"].lane("alice")}, later)
	if tk, _ := tp.admit(h, "bob", later.Add(tarpitForget+time.Second)); !letThrough(&tp, tk, later.Add(tarpitForget+time.Second)) {
		t.Fatalf("after %v of silence the host is not forgotten", tarpitForget)
	}
}

// letThrough reports whether tk (nil: answered busy) is let through at now.
func letThrough(tp *tarpit, tk *laneTicket, now time.Time) bool {
	if tk == nil {
		return false
	}
	ok, _, _, _ := tp.turn(tk, now)
	return ok
}

// TestTarpitBusyAfterQueueMax: an attempt still waiting tarpitQueueMax
// after it came is answered busy and leaves the queue.
func TestTarpitBusyAfterQueueMax(t *testing.T) {
	var tp tarpit
	t0 := time.Unix(1_000_000, 0)
	first, _ := tp.admit("10.0.0.9", "bob", t0)
	tp.turn(first, t0)
	tp.failed(first, t0)
	t0 = t0.Add(time.Second)
	second, _ := tp.admit("10.0.0.9", "bob", t0)
	tp.turn(second, t0) // running, and never decided
	tk, _ := tp.admit("10.0.0.9", "bob", t0)
	if ok, busy, _, _ := tp.turn(tk, t0.Add(tarpitQueueMax-time.Millisecond)); ok || busy {
		t.Fatalf("before its deadline: let through %v, busy %v", ok, busy)
	}
	if ok, busy, _, _ := tp.turn(tk, t0.Add(tarpitQueueMax)); ok || !busy {
		t.Fatalf("at its deadline: let through %v, busy %v, want busy", ok, busy)
	}
}

// TestTarpitBounded: a flood from more hosts than tarpitHostsMax keeps the
// map bounded.
func TestTarpitBounded(t *testing.T) {
	var tp tarpit
	t0 := time.Unix(1_000_000, 0)
	for i := range 3 * tarpitHostsMax {
		h := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		tk, _ := tp.admit(h, "u", t0)
		tp.turn(tk, t0)
		tp.failed(tk, t0)
	}
	if n := len(tp.hosts); n > tarpitHostsMax {
		t.Fatalf("%d hosts kept, want at most %d", n, tarpitHostsMax)
	}
}

func TestPenalty(t *testing.T) {
	for _, tc := range []struct {
		fails int
		want  time.Duration
	}{{0, 0}, {1, 100 * time.Millisecond}, {2, 200 * time.Millisecond}, {6, 3200 * time.Millisecond}, {7, tarpitMax}, {100, tarpitMax}} {
		if got := penalty(tc.fails); got != tc.want {
			t.Errorf("penalty(%d) = %v, want %v", tc.fails, got, tc.want)
		}
	}
}

// TestTarpitSpacesFirstBurst: attempts made in parallel are spaced also
// before the first failure comes back (one bcrypt later: 50-300 ms on a
// Pi): at most tarpitFreeParallel are let through at once.
func TestTarpitSpacesFirstBurst(t *testing.T) {
	var tp tarpit
	t0 := time.Unix(1_000_000, 0)
	through := 0
	for range 1000 {
		tk, busy := tp.admit("10.0.0.9", "bob", t0)
		if !busy && letThrough(&tp, tk, t0) {
			through++
		}
	}
	if through != tarpitFreeParallel {
		t.Fatalf("%d parallel attempts from one host let through at once, want %d", through, tarpitFreeParallel)
	}
}

// TestTarpitSuccessClearsOnlyItsUser: a success clears only its own user's
// failures, so an attacker owning one valid login (any sensor's
// credentials) cannot reset its penalty between guesses at another user's
// password.
func TestTarpitSuccessClearsOnlyItsUser(t *testing.T) {
	var tp tarpit
	t0 := time.Unix(1_000_000, 0)
	now := t0
	for range 10 {
		tk, _ := tp.admit("10.0.0.9", "bob", now) // a guess at bob's password
		for !letThrough(&tp, tk, now) {
			now = now.Add(10 * time.Millisecond)
		}
		tp.failed(tk, now)
		own, _ := tp.admit("10.0.0.9", "mallory", now) // the attacker's own valid login
		if !letThrough(&tp, own, now) {
			t.Fatal("the attacker's own login waits")
		}
		tp.succeeded(own)
	}
	if took := now.Sub(t0); took < 10*time.Second {
		t.Fatalf("10 wrong guesses, interleaved with a valid login, were checked within %v", took)
	}
}

// TestTarpitLanes: guesses at one user's password from an address do not
// slow another user's login from it; guesses spread over more user names
// than an address has lanes share one lane and are slowed there.
func TestTarpitLanes(t *testing.T) {
	var tp tarpit
	checks, _, _ := floodSim(&tp, 32, "bob", 50*time.Millisecond, 5*time.Second)
	if len(checks) != 6 {
		t.Fatalf("bob's lane: %d checks", len(checks))
	}
	t0 := time.Unix(1_000_000, 0).Add(5 * time.Second)
	if tk, _ := tp.admit("10.0.0.9", "alice", t0); !letThrough(&tp, tk, t0) {
		t.Fatal("alice from the flooding address waits")
	} else {
		tp.succeeded(tk)
	}
	// Spread over many user names: the first lanes fill, the rest share
	// one, which makes the schedule's checks.
	var tp2 tarpit
	now := time.Unix(1_000_000, 0)
	checked := 0
	for i := 0; now.Before(time.Unix(1_000_000, 0).Add(60 * time.Second)); i++ {
		tk, busy := tp2.admit("10.0.0.9", fmt.Sprintf("user%d", i), now)
		if !busy && letThrough(&tp2, tk, now) {
			checked++
			tp2.failed(tk, now)
		} else if !busy {
			tp2.abandoned(tk)
		}
		now = now.Add(10 * time.Millisecond)
	}
	if n := len(tp2.hosts["10.0.0.9"].lanes); n > tarpitUsersMax+1 {
		t.Fatalf("%d lanes kept for one address, want at most %d", n, tarpitUsersMax+1)
	}
	// 16 lanes of one check each, then the shared lane's schedule: 60 s
	// hold at most 12 of its 5 s slots after its first seven.
	if checked > tarpitUsersMax+7+12 {
		t.Fatalf("guesses over many user names had %d checks in 60 s", checked)
	}
}
