package bridge

// The acker of an upstream connection: the wait for each flow's end in
// send order. What an end means (acked, dropped, refused for now) the
// engine decided already (session.Engine.acknowledgedUpstream, the
// spool's session log: engineStore); the acker keeps the order, frees
// the flow's room in the window and hands a temporary refusal back to
// the picker (finish). The ack watchdog is the engine's.

import (
	"context"
	"time"

	"github.com/edgegw/edgegw/bridge/spool"
)

// ack is the connection's acker: it waits for publishes in send order
// (acknowledgements come in that order; 5.0 §4.6 requires it of clients,
// [MQTT-4.6.0-2]) and frees their room in the window, which learns the
// link from their round trips.
func (s *uplink) ack(ctx context.Context, win *sendWindow, pending *flowQueue) {
	b := s.b
	for {
		f, ok := pending.pop(ctx)
		if !ok {
			return
		}
		s.oldest, s.waiting = f, true // the oldest unacknowledged (stuck.go)
		select {
		case <-f.done:
		case <-ctx.Done():
			return
		}
		s.finish(f)
		s.oldest, s.waiting = inflight{}, false
		b.inflight.Add(-1)
		win.release(f.st, time.Now())
	}
}

// completed removes a record from the spool once upstream acknowledged it
// (PUBACK, PUBCOMP, or a QoS 0 write).
func (b *Bridge) completed(id spool.ID) {
	if err := b.spool.Load().Ack(id); err != nil {
		b.log.Error("spool ack", "id", uint64(id), "err", err)
	}
	b.acked.Add(1)
}
