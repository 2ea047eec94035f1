package metrics

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Ledger is a bridge's delivery ledger (bridge.Ledger), where every
// message it accepted went:
//
//	accepted = delivered + in_flight + queued + dropped (all reasons) + unknown - mismatch
type Ledger struct {
	Accepted  int64            `json:"accepted"`
	Delivered int64            `json:"delivered"`
	InFlight  int64            `json:"in_flight"`
	Queued    int64            `json:"queued"`
	Dropped   map[string]int64 `json:"dropped"`
	Unknown   int64            `json:"unknown"`
	Mismatch  int64            `json:"mismatch"`
	Rejected  map[string]int64 `json:"rejected"`
	AddsUp    bool             `json:"adds_up"`
	// Lanes: each priority lane's accepted = delivered + live + dropped +
	// unknown.
	Lanes map[string]LaneLedger `json:"lanes"`
}

// LaneLedger is one priority lane of a Ledger.
type LaneLedger struct {
	Accepted  int64 `json:"accepted"`
	Delivered int64 `json:"delivered"`
	Live      int64 `json:"live"`
	Dropped   int64 `json:"dropped"`
	Unknown   int64 `json:"unknown"`
}

// collectLedgers writes the ledger families of the bridges that have one.
func collectLedgers(w *expo, bs []BridgeStatus) {
	f := w.gauge("edgegw_bridge_ledger_messages",
		"Where every message a bridge accepted went (persisted): accepted = delivered + in_flight + queued + dropped + unknown.")
	for _, b := range bs {
		if l := b.Ledger; l != nil {
			f.v(float64(l.Accepted), "bridge", b.Name, "term", "accepted")
			f.v(float64(l.Delivered), "bridge", b.Name, "term", "delivered")
			f.v(float64(l.InFlight), "bridge", b.Name, "term", "in_flight")
			f.v(float64(l.Queued), "bridge", b.Name, "term", "queued")
			f.v(float64(l.Unknown), "bridge", b.Name, "term", "unknown")
		}
	}
	f = w.gauge("edgegw_bridge_ledger_dropped_messages", "Messages a bridge accepted and dropped, by reason (persisted).")
	for _, b := range bs {
		if l := b.Ledger; l != nil {
			for _, r := range sortedKeys(l.Dropped) {
				f.v(float64(l.Dropped[r]), "bridge", b.Name, "reason", r)
			}
		}
	}
	f = w.gauge("edgegw_bridge_ledger_lane_messages",
		"The ledger per priority lane: accepted = delivered + live + dropped + unknown (persisted).")
	for _, b := range bs {
		if l := b.Ledger; l != nil {
			for _, lane := range sortedKeys(l.Lanes) {
				ll := l.Lanes[lane]
				for _, tv := range []struct {
					term string
					v    int64
				}{{"accepted", ll.Accepted}, {"delivered", ll.Delivered}, {"live", ll.Live}, {"dropped", ll.Dropped}, {"unknown", ll.Unknown}} {
					f.v(float64(tv.v), "bridge", b.Name, "lane", lane, "term", tv.term)
				}
			}
		}
	}
	f = w.counter("edgegw_bridge_rejected_total", "Local messages a bridge did not accept, by reason (since start).")
	for _, b := range bs {
		if l := b.Ledger; l != nil {
			for _, r := range sortedKeys(l.Rejected) {
				f.v(float64(l.Rejected[r]), "bridge", b.Name, "reason", r)
			}
		}
	}
	f = w.gauge("edgegw_bridge_ledger_adds_up", "1 if the bridge's ledger equation holds.")
	for _, b := range bs {
		if l := b.Ledger; l != nil {
			v := 0.0
			if l.AddsUp {
				v = 1
			}
			f.v(v, "bridge", b.Name)
		}
	}
}

// serveLedger is /ledger: every bridge's ledger as text an operator reads
// at a glance, or as JSON (?format=json, by bridge name).
func serveLedger(w http.ResponseWriter, r *http.Request, src Sources) {
	var bs []BridgeStatus
	if src.Bridges != nil {
		bs = src.Bridges()
	}
	if r.URL.Query().Get("format") == "json" {
		out := make(map[string]*Ledger, len(bs))
		for _, b := range bs {
			out[b.Name] = b.Ledger
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	WriteLedgers(w, bs)
}

// WriteLedgers writes the text form of /ledger.
func WriteLedgers(w io.Writer, bs []BridgeStatus) {
	if len(bs) == 0 {
		fmt.Fprintln(w, "no bridges")
	}
	for _, b := range bs {
		l := b.Ledger
		if l == nil {
			fmt.Fprintf(w, "bridge %s: spool not open, nothing to account for\n", b.Name)
			continue
		}
		verdict := "adds up"
		if !l.AddsUp {
			verdict = "DOES NOT ADD UP"
		}
		var dropped int64
		for _, n := range l.Dropped {
			dropped += n
		}
		fmt.Fprintf(w, "bridge %s: %s\n", b.Name, verdict)
		fmt.Fprintf(w, "  accepted %d = delivered %d + in flight %d + queued %d + dropped %d + unknown %d",
			l.Accepted, l.Delivered, l.InFlight, l.Queued, dropped, l.Unknown)
		if l.Mismatch != 0 {
			fmt.Fprintf(w, " - mismatch %d", l.Mismatch)
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "  dropped  %s\n", joinCounts(l.Dropped))
		for _, lane := range []string{"high", "normal", "bulk"} {
			if ll, ok := l.Lanes[lane]; ok && ll.Accepted > 0 {
				fmt.Fprintf(w, "  lane %-6s accepted %d = delivered %d + live %d + dropped %d + unknown %d\n",
					lane, ll.Accepted, ll.Delivered, ll.Live, ll.Dropped, ll.Unknown)
			}
		}
		fmt.Fprintf(w, "  rejected %s (never accepted; since start)\n", joinCounts(l.Rejected))
	}
}

func joinCounts(m map[string]int64) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// ledgerSys returns the ledger's $SYS topics below prefix: the JSON at
// ledger, and each term at ledger/<term>, ledger/dropped/<reason> and
// ledger/rejected/<reason>. None while the spool is not open.
func ledgerSys(prefix string, l *Ledger) []SysValue {
	if l == nil {
		return nil
	}
	js, _ := json.Marshal(l)
	p := prefix + "ledger"
	out := []SysValue{
		{p, string(js)},
		{p + "/accepted", strconv.FormatInt(l.Accepted, 10)},
		{p + "/delivered", strconv.FormatInt(l.Delivered, 10)},
		{p + "/in_flight", strconv.FormatInt(l.InFlight, 10)},
		{p + "/queued", strconv.FormatInt(l.Queued, 10)},
		{p + "/unknown", strconv.FormatInt(l.Unknown, 10)},
		{p + "/adds_up", strconv.FormatInt(boolInt(l.AddsUp), 10)},
	}
	for _, r := range sortedKeys(l.Dropped) {
		out = append(out, SysValue{p + "/dropped/" + r, strconv.FormatInt(l.Dropped[r], 10)})
	}
	for _, r := range sortedKeys(l.Rejected) {
		out = append(out, SysValue{p + "/rejected/" + r, strconv.FormatInt(l.Rejected[r], 10)})
	}
	return out
}
