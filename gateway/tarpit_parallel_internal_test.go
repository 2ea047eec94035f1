package gateway

import (
	"testing"
	"time"
)

// Regression (review): attempts made in parallel must be spaced also before
// the first failure comes back (one bcrypt later: 50-300 ms on a Pi):
// otherwise a burst of max_connections guesses all get checked at once and
// queue in the verifier ahead of other addresses' logins.
func TestTarpitFirstBurstUnspaced(t *testing.T) {
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

// Regression (review): a success cleared the whole address, so an attacker
// owning one valid login (any sensor's credentials) reset its penalty
// between guesses at another user's password. A success clears only its
// own user's failures.
func TestTarpitResetBySuccess(t *testing.T) {
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
