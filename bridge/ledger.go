package bridge

// Design note: the delivery ledger. The spool keeps the persisted part
// (spool.Ledger, bridge/spool/ledger.go): every message it ever accepted
// is delivered, live or dropped by reason, exactly, across restarts and
// crashes. The bridge splits live into in flight (handed to the uplink,
// not yet acknowledged) and queued, and adds what was never accepted
// (Rejected: the publisher got a negative acknowledgement, or for QoS 0
// nothing), which is outside the equation and counted since the start.
// cmd/edgegw publishes it on /metrics, /ledger and, retained, below
// $SYS/bridge/<name>/ledger (cmd/edgegw/internal/metrics).

import (
	"errors"
	"time"

	"github.com/edgegw/edgegw/bridge/spool"
)

// Ledger is where every message the bridge accepted went:
//
//	Accepted = Delivered + InFlight + Queued + sum(Dropped) + Unknown - Mismatch
//
// Every term but Rejected is persisted with the spool (see spool.Ledger
// for what a crash does to each). JSON names are those of
// /ledger?format=json.
type Ledger struct {
	Accepted  uint64                `json:"accepted"`
	Delivered uint64                `json:"delivered"` // acknowledged upstream (PUBACK, PUBCOMP; QoS 0 once written)
	InFlight  uint64                `json:"in_flight"` // handed to the uplink, not yet acknowledged
	Queued    uint64                `json:"queued"`    // in the spool, not yet sent on this connection
	Dropped   map[string]uint64     `json:"dropped"`   // by reason: spool_full, expired, corrupt, refused, lost
	Unknown   uint64                `json:"unknown"`   // removed by a spool from before the ledger, or acks.log damage
	Mismatch  uint64                `json:"mismatch"`  // 0 unless acks.log damage counted removals twice
	Rejected  map[string]uint64     `json:"rejected"`  // never accepted (since start): too_large, no_space, no_spool, failed
	IDGap     uint64                `json:"id_gap"`    // spool IDs skipped after unclean stops (not messages)
	AddsUp    bool                  `json:"adds_up"`   // the equation above holds in this snapshot
	Lanes     map[string]LaneLedger `json:"lanes"`     // by priority lane: high, normal, bulk
	Time      time.Time             `json:"time"`      // when the snapshot was taken
}

// LaneLedger is one priority lane's part of the ledger:
// Accepted = Delivered + Live + sum(Dropped) + Unknown (in flight and
// queued are not split per lane).
type LaneLedger struct {
	Accepted  uint64            `json:"accepted"`
	Delivered uint64            `json:"delivered"`
	Live      uint64            `json:"live"`
	Dropped   map[string]uint64 `json:"dropped"`
	Unknown   uint64            `json:"unknown"`
}

// Sum is the right-hand side of the equation.
func (l Ledger) Sum() uint64 {
	n := l.Delivered + l.InFlight + l.Queued + l.Unknown
	for _, v := range l.Dropped {
		n += v
	}
	return n - l.Mismatch
}

// rejectReasons name the ways a local message is not accepted.
var rejectReasons = [...]string{"too_large", "no_space", "no_spool", "failed"}

// rejectReason classifies an error of the spool's append path.
func rejectReason(err error) int {
	switch {
	case errors.Is(err, spool.ErrTooLarge):
		return 0
	case errors.Is(err, spool.ErrNoSpace):
		return 1
	case errors.Is(err, errNoSpool):
		return 2
	}
	return 3
}

// Ledger returns a snapshot of the bridge's ledger; ok is false while the
// spool is not open (nothing can be accounted for).
func (b *Bridge) Ledger() (l Ledger, ok bool) {
	sp := b.spool.Load()
	if sp == nil {
		return l, false
	}
	sl := sp.Stats().Ledger
	l = Ledger{
		Accepted:  sl.Accepted,
		Delivered: sl.Delivered,
		Unknown:   sl.Unknown,
		Mismatch:  sl.Mismatch,
		IDGap:     sl.Gap,
		Dropped:   make(map[string]uint64, len(sl.Dropped)),
		Rejected:  make(map[string]uint64, len(rejectReasons)),
		Time:      time.Now(),
	}
	for r, n := range sl.Dropped {
		l.Dropped[string(r)] = n
	}
	l.Lanes = make(map[string]LaneLedger, spool.NumLanes)
	for i, ll := range sl.Lanes {
		d := make(map[string]uint64, len(ll.Dropped))
		for r, n := range ll.Dropped {
			d[string(r)] = n
		}
		l.Lanes[spool.Lane(i).String()] = LaneLedger{Accepted: ll.Accepted, Delivered: ll.Delivered,
			Live: ll.Live, Dropped: d, Unknown: ll.Unknown}
	}
	// In flight is the bridge's count, live the spool's, read a moment
	// apart: in flight is at most live.
	l.InFlight = min(uint64(max(b.inflight.Load(), 0)), sl.Live)
	l.Queued = sl.Live - l.InFlight
	for i, r := range rejectReasons {
		l.Rejected[r] = b.rejected[i].Load()
	}
	l.AddsUp = l.Sum() == l.Accepted
	return l, true
}
