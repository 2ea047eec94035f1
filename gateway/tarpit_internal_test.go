package gateway

import (
	"fmt"
	"testing"
	"time"
)

// TestTarpitSchedule drives the tarpit's clock: a lone first attempt
// waits nothing; after n failures the next attempt waits the penalty;
// attempts in parallel are spaced one penalty apart; a queue longer than
// tarpitQueueMax is answered "busy"; a success clears its own user's
// failures; a long silence forgets the host.
func TestTarpitSchedule(t *testing.T) {
	var tp tarpit
	t0 := time.Unix(1_000_000, 0)
	const h = "10.0.0.9"
	if w, busy := tp.admit(h, t0); w != 0 || busy {
		t.Fatalf("first attempt waits %v busy %v", w, busy)
	}
	tp.failed(h, "alice", t0)
	for range 2 {
		tp.admit(h, t0)
		tp.failed(h, "alice", t0)
	}
	// 3 failures: penalty 400 ms; the host's next slot is already set by
	// the last failure (t0 + 400 ms).
	w1, _ := tp.admit(h, t0)
	w2, _ := tp.admit(h, t0)
	if w1 != 400*time.Millisecond || w2 != 800*time.Millisecond {
		t.Fatalf("parallel attempts wait %v and %v, want 400ms and 800ms", w1, w2)
	}
	tp.abandoned(h)
	tp.abandoned(h)
	if w, _ := tp.admit("10.0.0.10", t0); w != 0 {
		t.Fatalf("another host waits %v", w)
	}
	for range 20 {
		tp.failed(h, "alice", t0)
	}
	busy := false
	for i := 0; i < 10 && !busy; i++ {
		_, busy = tp.admit(h, t0)
	}
	if !busy {
		t.Fatalf("a queue past %v is not answered busy", tarpitQueueMax)
	}
	tp.succeeded(h, "alice")
	later := t0.Add(time.Hour)
	if w, busy := tp.admit(h, later); w != 0 || busy {
		t.Fatalf("after alice's success: wait %v busy %v", w, busy)
	}
	tp.failed(h, "bob", later)
	if w, _ := tp.admit(h, later.Add(tarpitForget+time.Second)); w != 0 {
		t.Fatalf("after %v of silence: wait %v", tarpitForget, w)
	}
}

// TestTarpitBounded: a flood from more hosts than tarpitHostsMax keeps the
// map bounded.
func TestTarpitBounded(t *testing.T) {
	var tp tarpit
	t0 := time.Unix(1_000_000, 0)
	for i := range 3 * tarpitHostsMax {
		tp.failed(fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), "u", t0)
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
// Pi), or a burst of max_connections guesses would all be checked at once
// and queue in the verifier ahead of other addresses' logins. Found in
// review.
func TestTarpitSpacesFirstBurst(t *testing.T) {
	var tp tarpit
	t0 := time.Unix(1_000_000, 0)
	admitted := 0
	for range 1000 {
		if w, busy := tp.admit("10.0.0.9", t0); w == 0 && !busy {
			admitted++
		}
	}
	if admitted > tarpitFreeParallel {
		t.Fatalf("%d parallel attempts from one host admitted with no wait", admitted)
	}
}

// TestTarpitSuccessClearsOnlyItsUser: a success clears only its own user's
// failures, so an attacker owning one valid login (any sensor's
// credentials) cannot reset its penalty between guesses at another user's
// password. Found in review, when a success cleared the whole address.
func TestTarpitSuccessClearsOnlyItsUser(t *testing.T) {
	var tp tarpit
	t0 := time.Unix(1_000_000, 0)
	var waited time.Duration
	for i := range 50 {
		now := t0.Add(time.Duration(i) * time.Second)
		w, _ := tp.admit("10.0.0.9", now) // a guess at bob's password
		waited += w
		tp.failed("10.0.0.9", "bob", now)
		w, _ = tp.admit("10.0.0.9", now) // the attacker's own valid login
		waited += w
		tp.succeeded("10.0.0.9", "mallory")
	}
	if waited < 50*tarpitBase*4 {
		t.Fatalf("50 wrong guesses, interleaved with a valid login, cost %v of tarpit in all", waited)
	}
}
