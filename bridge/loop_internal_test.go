package bridge

import (
	"slices"
	"testing"
	"time"
)

// TestBackoffKeepsGrowingOverShortConnections: a connection that the
// broker ends soon after its CONNACK without having delivered anything
// does not reset the reconnect backoff (before, every CONNACK did, and a
// broker that closes the connection at once was reconnected to at
// reconnect_min for ever, ~10 times a second with 100 ms); one that
// delivered a message, or lasted healthyUplink, does. The steps are
// backoff.cur: the jittered wait is in [cur/2, cur], at least min.
func TestBackoffKeepsGrowingOverShortConnections(t *testing.T) {
	const min, max = 100 * time.Millisecond, 2 * time.Second
	bo := backoff{min: min, max: max}
	steps := func(n int, up time.Duration, acked uint64) []time.Duration {
		var s []time.Duration
		for range n {
			bo.lost(up, acked) // the loop: serve, lost, then the wait
			if d := bo.next(); d < min || d > bo.cur || d < bo.cur/2 {
				t.Fatalf("wait %s outside [%s, %s] (and at least %s)", d, bo.cur/2, bo.cur, min)
			}
			s = append(s, bo.cur)
		}
		return s
	}
	ms := func(v ...int) []time.Duration {
		var s []time.Duration
		for _, x := range v {
			s = append(s, time.Duration(x)*time.Millisecond)
		}
		return s
	}
	if got, want := steps(7, 50*time.Millisecond, 0), ms(100, 200, 400, 800, 1600, 2000, 2000); !slices.Equal(got, want) {
		t.Fatalf("connections ended 50 ms after CONNACK, nothing delivered: steps %v, want %v", got, want)
	}
	if got, want := steps(1, 50*time.Millisecond, 1), ms(100); !slices.Equal(got, want) {
		t.Fatalf("a connection that delivered one message: step %v, want %v (reset)", got, want)
	}
	steps(3, healthyUplink-time.Millisecond, 0)
	if got, want := steps(1, healthyUplink-time.Millisecond, 0), ms(1600); !slices.Equal(got, want) {
		t.Fatalf("connections just short of %s: step %v, want %v", healthyUplink, got, want)
	}
	if got, want := steps(1, healthyUplink, 0), ms(100); !slices.Equal(got, want) {
		t.Fatalf("a connection up %s with nothing to deliver: step %v, want %v (reset)", healthyUplink, got, want)
	}
}
