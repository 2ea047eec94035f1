package gateway

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
)

// gateQueue puts a check from host in g's queue, on its own goroutine,
// and returns once it waits there; its name is sent on passed when the
// gate lets it through, and its enter's result on ok.
func gateQueue(t *testing.T, g *checkGate, name, host string, guessed bool, done <-chan struct{}, passed chan<- string, ok chan<- bool) {
	t.Helper()
	g.mu.Lock()
	n := len(g.waiting)
	g.mu.Unlock()
	go func() {
		r := g.enter(host, func() bool { return guessed }, done)
		if r {
			passed <- name
		}
		if ok != nil {
			ok <- r
		}
	}()
	testutil.Eventually(t, 10*time.Second, name+" waiting at the gate", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.waiting) == n+1
	})
}

// TestCheckGateOrder: with its one slot taken by a guess, the gate lets
// the waiting checks through in the order of checkgate.go: checks for
// lanes nobody is guessing first (in the order they came), then guesses,
// an address that has had no turn yet before one that has, in the order
// they came within an address.
func TestCheckGateOrder(t *testing.T) {
	g := &checkGate{slots: 1}
	if !g.enter("10.0.0.1", func() bool { return true }, nil) {
		t.Fatal("an idle gate did not let a check through")
	}
	passed := make(chan string, 8)
	gateQueue(t, g, "guess1", "10.0.0.1", true, nil, passed, nil)
	gateQueue(t, g, "guess2", "10.0.0.1", true, nil, passed, nil)
	gateQueue(t, g, "alice", "10.0.0.1", false, nil, passed, nil)
	gateQueue(t, g, "guess3", "10.0.0.1", true, nil, passed, nil)
	gateQueue(t, g, "other-guess", "10.0.0.2", true, nil, passed, nil)
	gateQueue(t, g, "carol", "10.0.0.3", false, nil, passed, nil)
	var order []string
	for range 6 {
		g.leave() // the check running ends; one more goes through
		select {
		case name := <-passed:
			order = append(order, name)
		case <-time.After(10 * time.Second):
			t.Fatalf("nothing let through after %v", order)
		}
	}
	g.leave()
	want := []string{"alice", "carol", "other-guess", "guess1", "guess2", "guess3"}
	if !slices.Equal(order, want) {
		t.Fatalf("let through in the order %v, want %v", order, want)
	}
	if g.running != 0 || len(g.waiting) != 0 || len(g.turn) != 0 {
		t.Fatalf("after all checks: running %d, waiting %d, turns %v", g.running, len(g.waiting), g.turn)
	}
}

// TestCheckGateStop: a check that waits when the server stops leaves the
// queue without running, and the slot goes to the next one.
func TestCheckGateStop(t *testing.T) {
	g := &checkGate{slots: 1}
	g.enter("10.0.0.1", func() bool { return true }, nil)
	stop := make(chan struct{})
	passed := make(chan string, 2)
	stopped := make(chan bool, 1)
	gateQueue(t, g, "stopped", "10.0.0.1", false, stop, passed, stopped)
	gateQueue(t, g, "next", "10.0.0.2", true, nil, passed, nil)
	close(stop)
	if <-stopped {
		t.Fatal("a check let through after its server stopped")
	}
	g.leave()
	if name := <-passed; name != "next" {
		t.Fatalf("%s let through, want next", name)
	}
	g.leave()
	if g.running != 0 || len(g.waiting) != 0 {
		t.Fatalf("running %d, waiting %d", g.running, len(g.waiting))
	}
}

// TestCheckGateGuessedWhenPicked: a lane's first checks come in together,
// before any of them failed. Those still waiting when one fails are
// guesses from then on: a user nobody is guessing, who came after them
// from the same address, goes first.
func TestCheckGateGuessedWhenPicked(t *testing.T) {
	g := &checkGate{slots: 1}
	var mu sync.Mutex
	fails := 0 // the flooded lane's failed logins
	laneGuessed := func() bool { mu.Lock(); defer mu.Unlock(); return fails > 0 }
	if !g.enter("10.0.0.1", laneGuessed, nil) {
		t.Fatal("an idle gate did not let a check through")
	}
	passed := make(chan string, 4)
	for _, name := range []string{"guess2", "guess3"} {
		n := len(g.waiting)
		go func() {
			if g.enter("10.0.0.1", laneGuessed, nil) {
				passed <- name
			}
		}()
		testutil.Eventually(t, 10*time.Second, name+" waiting", func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			return len(g.waiting) == n+1
		})
	}
	gateQueue(t, g, "alice", "10.0.0.1", false, nil, passed, nil)
	mu.Lock()
	fails = 1 // the running guess failed
	mu.Unlock()
	var order []string
	for range 3 {
		g.leave()
		select {
		case name := <-passed:
			order = append(order, name)
		case <-time.After(10 * time.Second):
			t.Fatalf("nothing let through after %v", order)
		}
	}
	g.leave()
	if want := []string{"alice", "guess2", "guess3"}; !slices.Equal(order, want) {
		t.Fatalf("let through in the order %v, want %v", order, want)
	}
}
