package main

// Login floods: the wrong-password attack of issue 32, from the address
// the right logins come from (every local program on a gateway connects
// from 127.0.0.1; sensors behind one NAT share an address). 32 workers
// open a new connection per guess as fast as the broker answers; during
// the flood a user that never logged in (fresh), one that logged in just
// before it (recent), both from the flooding address, and a fresh user
// from another address log in with their right passwords, one after the
// other, and each login's time to CONNACK is reported.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
)

const (
	loginFloodWorkers = 32
	loginFloodLength  = 5 * time.Second
	// loginFloodInto is how long the flood runs before the first right
	// login: long enough for a tarpit's penalty to reach its cap.
	loginFloodInto = time.Second
)

// attackLoginFlood guesses the password of one user name that does not
// exist (mallory).
func attackLoginFlood(ctx context.Context, addr string) outcome {
	return loginFlood(ctx, addr, func(w, i int) string { return "mallory" })
}

// attackLoginFloodNames guesses with a new user name every time.
func attackLoginFloodNames(ctx context.Context, addr string) outcome {
	return loginFlood(ctx, addr, func(w, i int) string { return fmt.Sprintf("guess%d-%d", w, i) })
}

type floodCounts struct {
	checked, busy, accepted, noAck, timeouts atomic.Int64 // checked: refused as bad credentials
}

func (f *floodCounts) add(err error, ca *packet.Connack) {
	var ne net.Error
	switch {
	case err == nil:
		f.accepted.Add(1)
	case errors.Is(err, errRefused) && ca != nil && (ca.ReasonCode == packet.V3RefusedBadUsernameOrPassword || ca.ReasonCode == packet.V3RefusedNotAuthorized):
		f.checked.Add(1)
	case errors.Is(err, errRefused):
		f.busy.Add(1)
	case errors.As(err, &ne) && ne.Timeout():
		f.timeouts.Add(1)
	default:
		f.noAck.Add(1)
	}
}

func loginFlood(ctx context.Context, addr string, user func(w, i int) string) outcome {
	// ops logs in once from the flooding address before: its credential
	// is recent during the flood.
	if c, _, err := dialMQTT(ctx, addr, login{user: "ops", pass: users["ops"], clientID: "ops-before", clean: true}); err != nil {
		return outcome{Note: "ops before the flood: " + err.Error()}
	} else {
		c.close()
	}
	stop := make(chan struct{})
	var counts floodCounts
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < loginFloodWorkers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				c, ca, err := dialMQTT(ctx, addr, login{user: user(w, i), pass: "wrong", clientID: fmt.Sprintf("guess-%d-%d", w, i), clean: true})
				if c != nil {
					c.close()
				}
				counts.add(err, ca)
			}
		}(w)
	}
	pause(ctx, loginFloodInto)
	timed := func(l login) (string, int64) {
		t := time.Now()
		c, _, err := dialMQTT(ctx, addr, l)
		ms := time.Since(t).Milliseconds()
		if err != nil {
			return fmt.Sprintf("not served after %d ms: %v", ms, err), ms
		}
		c.close()
		return fmt.Sprintf("%d ms", ms), ms
	}
	freshNote, freshMs := timed(login{user: "alice", pass: users["alice"], clientID: "fresh", clean: true})
	recentNote, recentMs := timed(login{user: "ops", pass: users["ops"], clientID: "recent", clean: true})
	otherNote, otherMs := timed(login{user: "carol", pass: users["carol"], clientID: "other", clean: true, from: goodIP})
	pause(ctx, loginFloodLength-time.Since(start))
	close(stop)
	el := time.Since(start).Seconds()
	wg.Wait()
	return outcome{
		Note: fmt.Sprintf("%d workers from %s, %.1f s: %d guesses refused as bad credentials (CONNACK 4 or 5: %.1f/s), %d answered busy (3), %d closed without CONNACK, %d unanswered in 10 s, %d accepted; right logins during it: fresh alice (same address) %s, recent ops (same address) %s, fresh carol (%s) %s",
			loginFloodWorkers, attackerIP, el, counts.checked.Load(), float64(counts.checked.Load())/el, counts.busy.Load(), counts.noAck.Load(), counts.timeouts.Load(), counts.accepted.Load(),
			freshNote, recentNote, goodIP, otherNote),
		Counts: map[string]int64{"bad_credentials": counts.checked.Load(), "busy": counts.busy.Load(), "closed_no_connack": counts.noAck.Load(),
			"timeouts": counts.timeouts.Load(), "accepted": counts.accepted.Load(),
			"fresh_same_ms": freshMs, "recent_same_ms": recentMs, "fresh_other_ms": otherMs},
	}
}
