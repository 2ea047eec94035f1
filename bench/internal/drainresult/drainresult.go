// Package drainresult is what bench/drainreport and bench/lanesreport
// read alike from edgegw-bench's JSON result (cmd/edgegw-bench Result) of
// a scenario that drains a backlog over the slow link (drain, lanes).
package drainresult

import "fmt"

// Gen is the part of a drain or lanes result both reports use; a report
// embeds it in its own record's generator result.
type Gen struct {
	QoS2Every  int     `json:"qos2_every"`
	Backlog    int     `json:"backlog"`
	RTTms      float64 `json:"rtt_ms"`
	LinkRate   int     `json:"link_rate"`
	ReconnectS float64 `json:"reconnect_s"`
	DrainS     float64 `json:"drain_s"`
	MsgPerS    float64 `json:"msg_per_s"`
	LinkUse    float64 `json:"link_use"`
	LatP50us   float64 `json:"lat_p50_us"`
	LatP99us   float64 `json:"lat_p99_us"`
	Lost       int64   `json:"lost"`
	Dups       int64   `json:"dups"`
	Dups2      int64   `json:"dups_qos2"`
	LiveSent   int64   `json:"live_sent"`
	LiveLost   int64   `json:"live_lost"`
	Error      string  `json:"error"`
}

// LinkUseCell is the link's use during the drain, or a dash for an
// unlimited link (no rate to compare with).
func (g *Gen) LinkUseCell() string {
	if g.LinkRate <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f%%", 100*g.LinkUse)
}

// ErrorSuffix ends a progress line with the generator's error, if any.
func (g *Gen) ErrorSuffix() string {
	if g.Error == "" {
		return ""
	}
	return " ERROR: " + g.Error
}
