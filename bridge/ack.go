package bridge

// The acker of an upstream connection, over MQTT 3.1.1 and MQTT 5 alike:
// the wait for each flow's end in send order and the ack watchdog are
// here; what an end means is the protocol's (finish, uplink311.go and
// uplink5.go).

import (
	"context"
	"fmt"
	"time"

	"github.com/edgegw/edgegw/bridge/spool"
)

// ack is the connection's acker and ack watchdog: it waits for publishes
// in send order (acknowledgements come in that order; 5.0 §4.6 requires
// it of clients, [MQTT-4.6.0-2]), frees their room in the window (which
// learns the link from their round trips), and tears the uplink down if
// the oldest one is older than ack_timeout with nothing read from
// upstream since it was sent. Its timer runs only while a publish is in
// flight (idle costs nothing).
func (s *uplink) ack(ctx context.Context, win *sendWindow, pending *flowQueue, p protocol) {
	b := s.b
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		f, ok := pending.pop(ctx)
		if !ok {
			return
		}
		s.oldest, s.waiting = f, true // the oldest unacknowledged (stuck.go)
		if !s.engineWatchdog {
			timer.Reset(time.Until(f.st.sent.Add(b.cfg.AckTimeout)))
		}
		// A QoS 1/2 publish is complete when the broker ended its flow
		// (done); a paho token, if any, reports a failure to send it. A
		// QoS 0 publish over 3.1.1 is complete when its token is.
		var tokDone <-chan struct{}
		if f.tok != nil {
			tokDone = f.tok.Done()
		}
		done := f.done
	wait:
		for {
			if f.direct && f.out.ended.Load() {
				timer.Stop()
				break wait
			}
			select {
			case <-done:
				if f.direct {
					continue // a wake-up shared by the direct publishes: look again
				}
				timer.Stop()
				break wait
			case <-tokDone:
				if err := f.tok.Error(); err != nil {
					s.teardown(fmt.Errorf("publish: %w", err))
					return
				}
				if done == nil {
					timer.Stop()
					break wait
				}
				tokDone = nil // acked; paho's Del came first or follows at once
			case <-timer.C:
				if b.lastRead.Load() < f.st.sent.UnixNano() {
					b.trips.Add(1)
					s.teardown(fmt.Errorf("ack watchdog: no ack for %s and nothing from upstream", b.cfg.AckTimeout))
					return
				}
				timer.Reset(b.cfg.AckTimeout)
			case <-ctx.Done():
				return
			}
		}
		if !p.finish(f) {
			return
		}
		s.oldest, s.waiting = inflight{}, false
		b.inflight.Add(-1)
		win.release(f.st, time.Now())
	}
}

// completedByPeer is completed for a record the broker acknowledged
// (PUBACK or PUBCOMP read): progress for the reconnect backoff (loop.go).
// A QoS 0 write is not: a broker that closes the connection at an
// oversize PUBLISH never reads the QoS 0 ones written after it.
func (b *Bridge) completedByPeer(id spool.ID) {
	b.completed(id)
	b.peerAcked.Add(1)
}

// completed removes a record from the spool once upstream acknowledged it
// (PUBACK, PUBCOMP, or a QoS 0 write).
func (b *Bridge) completed(id spool.ID) {
	if err := b.spool.Load().Ack(id); err != nil {
		b.log.Error("spool ack", "id", uint64(id), "err", err)
	}
	b.acked.Add(1)
}
