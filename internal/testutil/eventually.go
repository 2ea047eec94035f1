package testutil

import (
	"testing"
	"time"
)

// pollInterval is how often Eventually checks: short against the test's
// deadline, long enough not to spin a shared machine.
const pollInterval = 5 * time.Millisecond

// Eventually polls cond until it holds, failing t (from the test's
// goroutine) when d has passed first; what names the awaited condition in
// the failure.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(pollInterval)
	}
}
