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
	"time"

	"github.com/edgegw/edgegw/bridge/spool"
	"github.com/edgegw/edgegw/gateway"
)

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
	}
}
