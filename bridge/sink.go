package bridge

// Design note: what a rule adds to a message on its way into the spool.
// A rule's max_age and a message's MQTT 5 expiry become one absolute
// expiry in the spool record, the earlier of the two: a reading worthless
// when old is dropped by the spool when the sender reaches it (counted
// as expired in the ledger), never sent, and an expiry survives restarts
// with the record. It is measured from the moment the bridge accepted the
// message, on the wall clock (a clock step moves it; there is nothing
// better that survives a reboot).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/edgegw/edgegw/bridge/spool"
	"github.com/edgegw/edgegw/gateway"
)

// sink is the bridge's spool as seen by the gateway: a gateway.AsyncSink.
type sink struct{ b *Bridge }

var _ gateway.AsyncSink = sink{}

// spoolMessage maps m through the out rules; ok is false if the bridge
// does not take it (its own message coming back, its own state report, or
// no out rule matches).
func (k sink) spoolMessage(m *gateway.Message) (sm spool.Message, ok bool) {
	b := k.b
	if m.Origin == b.origin { // loop prevention (the gateway checks it too)
		return sm, false
	}
	if m.Origin == gateway.OriginSys && m.Topic == b.c.Load().stateTop { // its own state (state.go), as before under b.origin
		return sm, false
	}
	r := b.c.Load().outRule(m.Topic)
	if r == nil {
		return sm, false
	}
	return spoolMessageFor(m, r, time.Now()), true
}

// errNoSpool is why a Failed bridge refuses a local message.
var errNoSpool = errors.New("spool not open")

// spoolOrErr returns the open spool, or an error saying why there is none.
func (k sink) spoolOrErr() (*spool.Spool, error) {
	if sp := k.b.spool.Load(); sp != nil {
		return sp, nil
	}
	why := ""
	if p := k.b.lastErr.Load(); p != nil {
		why = *p
	}
	return nil, fmt.Errorf("%w: %s", errNoSpool, why)
}

// refused counts, logs (rate-limited) and wraps an error of the spool
// about local topic.
func (k sink) refused(topic string, err error) error {
	k.b.acceptFailed.Add(1)
	k.b.rejected[rejectReason(err)].Add(1)
	err = fmt.Errorf("bridge %s: spool %q: %w", k.b.cfg.Name, topic, err)
	k.b.refusals.refused(topic, err)
	return err
}

// Accept maps m through the out rules and appends it to the spool; it
// returns once the message is durable (group commit), before the local
// publisher is acknowledged. The gateway uses AcceptAsync; Accept is for
// callers that want to block.
//
// A QoS 0 message is written at once (in order) but not waited for: no
// acknowledgement depends on it, and the gateway hands local QoS 0
// publishes to Accept on the publisher's reader, which must not stall for
// a commit window per message (nor leave its PINGREQs unanswered).
func (k sink) Accept(m *gateway.Message) error {
	sm, ok := k.spoolMessage(m)
	if !ok {
		return nil
	}
	sp, err := k.spoolOrErr()
	if err != nil {
		return k.refused(m.Topic, err)
	}
	if m.QoS == 0 {
		topic := m.Topic
		sp.AppendAsync(sm, func(_ spool.ID, err error) {
			if err != nil {
				k.refused(topic, err)
			} else {
				k.b.refusals.kept()
			}
		})
		return nil
	}
	if _, err := sp.Append(context.Background(), sm); err != nil {
		return k.refused(m.Topic, err)
	}
	k.b.refusals.kept()
	return nil
}

// AcceptAsync maps m through the out rules and writes it to the spool
// before it returns (so messages keep the order of the calls), without
// waiting for the fsync; done reports when the group commit covering it
// made it durable, or why it could not be kept. The gateway sends the
// publisher's PUBACK/PUBREC from done, so a local connection is not held to
// one message per commit window and its PINGREQs do not wait behind it.
// done is called exactly once, possibly before AcceptAsync returns; the
// spool's Close completes every pending done.
func (k sink) AcceptAsync(m *gateway.Message, done func(error)) {
	sm, ok := k.spoolMessage(m)
	if !ok {
		done(nil)
		return
	}
	sp, err := k.spoolOrErr()
	if err != nil {
		done(k.refused(m.Topic, err))
		return
	}
	topic := m.Topic // not m: the payload need not live until the commit
	sp.AppendAsync(sm, func(_ spool.ID, err error) {
		if err != nil {
			err = k.refused(topic, err)
		} else {
			k.b.refusals.kept()
		}
		done(err)
	})
}

// spoolExpiry is when m, accepted now through rule r, stops being worth
// sending: the earlier of its own expiry and now + r.MaxAge; zero: never.
func spoolExpiry(m *gateway.Message, r *rule, now time.Time) time.Time {
	e := m.Expiry
	if r.MaxAge > 0 {
		if byAge := now.Add(r.MaxAge); e.IsZero() || byAge.Before(e) {
			e = byAge
		}
	}
	return e
}

// spoolMessageFor maps m through out rule r.
func spoolMessageFor(m *gateway.Message, r *rule, now time.Time) spool.Message {
	return spool.Message{
		Topic:   r.RemotePrefix + m.Topic[len(r.LocalPrefix):],
		Payload: m.Payload,
		QoS:     min(m.QoS, byte(r.QoS)),
		Retain:  m.Retain,
		Expiry:  spoolExpiry(m, r, now),
		Lane:    r.lane,
	}
}
