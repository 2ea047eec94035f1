package bridge

// The uplink's MQTT version (Config.Protocol) and what an MQTT 5 broker's
// reason codes on PUBACK/PUBREC mean for a spooled message.
//
// Over MQTT 3.1.1 a broker that refuses a publish (quota exceeded, not
// authorized, topic invalid) still answers with a plain PUBACK/PUBREC: the
// refusal is invisible and the message is lost although the bridge took it
// for delivered (issue 12). MQTT 5 carries the reason code, so the bridge
// can keep a refused message for later or drop it knowingly, counted by
// reason, and never count it as delivered.

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgegw/edgegw/bridge/spool"
)

// The values of Config.Protocol.
const (
	Protocol311  = "3.1.1" // MQTT 3.1.1 (with the bridge flag unless NoBridgeFlag); the default
	Protocol5    = "5"     // MQTT 5
	ProtocolAuto = "auto"  // MQTT 5; MQTT 3.1.1 if the broker refuses version 5 in CONNACK
)

// parseProtocol checks a Config.Protocol value ("" is the default).
func parseProtocol(s string) (string, error) {
	switch s {
	case "", Protocol311:
		return Protocol311, nil
	case Protocol5:
		return Protocol5, nil
	case ProtocolAuto:
		return ProtocolAuto, nil
	}
	return "", fmt.Errorf("%q: must be 3.1.1, 5 or auto", s)
}

// Reason codes of PUBACK/PUBREC (MQTT 5, 3.4.2.1 and 3.5.2.1) the bridge
// treats by name.
const (
	rcSuccess             = 0x00
	rcNoMatchingSubs      = 0x10 // success: nobody subscribed
	rcUnspecified         = 0x80
	rcImplementation      = 0x83
	rcNotAuthorized       = 0x87
	rcTopicNameInvalid    = 0x90
	rcPacketIDInUse       = 0x91
	rcPacketTooLarge      = 0x95
	rcQuotaExceeded       = 0x97
	rcPayloadFormat       = 0x99
	rcRetainNotSupported  = 0x9A
	rcQoSNotSupported     = 0x9B
	rcUnsupportedProtocol = 0x84 // CONNACK: unsupported protocol version
)

// permanentRefusal reports whether a refusal (a reason code >= 0x80 on
// PUBACK/PUBREC) will be the same however often the message is sent: the
// message is then dropped and counted. Every other refusal, 0x97 quota
// exceeded above all, and codes this list does not know, is temporary:
// the message stays in the spool and is sent again after a backoff
// (acknowledged means kept; an unknown code is not a reason to lose it).
func permanentRefusal(rc byte) bool {
	switch rc {
	case rcNotAuthorized, rcTopicNameInvalid, rcPacketTooLarge, rcPayloadFormat,
		rcRetainNotSupported, rcQoSNotSupported:
		return true
	}
	return false
}

// PermanentRefusals returns the reason codes for which an MQTT 5 uplink
// drops a refused message (Stats.UpstreamDroppedBy can hold no other),
// in ascending order: /metrics shows a count for each, zero included.
func PermanentRefusals() []byte {
	return []byte{rcNotAuthorized, rcTopicNameInvalid, rcPacketTooLarge, rcPayloadFormat,
		rcRetainNotSupported, rcQoSNotSupported}
}

// ReasonName names an MQTT 5 reason code of a refusal ("not authorized").
func ReasonName(rc byte) string { return reasonName(rc) }

// reasonName names a refusal's reason code for logs and Stats.
func reasonName(rc byte) string {
	switch rc {
	case rcUnspecified:
		return "unspecified error"
	case rcImplementation:
		return "implementation specific error"
	case rcNotAuthorized:
		return "not authorized"
	case rcTopicNameInvalid:
		return "topic name invalid"
	case rcPacketIDInUse:
		return "packet identifier in use"
	case rcPacketTooLarge:
		return "packet too large"
	case rcQuotaExceeded:
		return "quota exceeded"
	case rcPayloadFormat:
		return "payload format invalid"
	case rcRetainNotSupported:
		return "retain not supported"
	case rcQoSNotSupported:
		return "QoS not supported"
	}
	return fmt.Sprintf("reason 0x%02x", rc)
}

// refusalCounts counts upstream refusals by reason code. Safe for
// concurrent use.
type refusalCounts struct {
	dropped [256]atomic.Uint64 // permanent: the record left the spool undelivered
	retried atomic.Uint64      // temporary: the record stays and is sent again
}

// droppedByReason returns the non-zero drop counts by reason code, and
// their total.
func (r *refusalCounts) droppedByReason() (map[byte]uint64, uint64) {
	var m map[byte]uint64
	var total uint64
	for i := range r.dropped {
		if n := r.dropped[i].Load(); n > 0 {
			if m == nil {
				m = make(map[byte]uint64)
			}
			m[byte(i)] = n
			total += n
		}
	}
	return m, total
}

// dropRefused removes a record that would be refused for good before it
// is sent (the sender's check against the broker's limits): it is
// counted by reason, never as delivered (Stats.Acked).
func (b *Bridge) dropRefused(rec spool.ID, rc byte) {
	if err := b.spool.Load().Drop(rec, spool.DropRefused); err != nil { // in the ledger as refused, not delivered
		b.log.Error("spool drop", "id", uint64(rec), "err", err)
	}
	b.upRefused.dropped[rc].Add(1)
	b.upRefusedLog.note(b.log, rc)
}

// refusalLog5 writes one log line per burst of upstream refusals of one
// reason, not one per message. Safe for concurrent use.
type refusalLog5 struct {
	mu   sync.Mutex
	last map[byte]time.Time
	n    map[byte]uint64 // refusals not yet logged
}

func (r *refusalLog5) note(log interface {
	Warn(msg string, args ...any)
}, rc byte) {
	r.mu.Lock()
	if r.last == nil {
		r.last, r.n = make(map[byte]time.Time), make(map[byte]uint64)
	}
	r.n[rc]++
	now := time.Now()
	if now.Sub(r.last[rc]) < refusalLogEvery {
		r.mu.Unlock()
		return
	}
	n := r.n[rc]
	r.n[rc], r.last[rc] = 0, now
	r.mu.Unlock()
	what := "dropped"
	if !permanentRefusal(rc) {
		what = "kept and sent again after a backoff"
	}
	log.Warn("upstream refused messages: "+what, "reason", reasonName(rc), "code", fmt.Sprintf("0x%02x", rc), "count", n)
}
