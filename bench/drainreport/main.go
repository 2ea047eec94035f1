// Command drain-report turns the drain benchmark's raw results (JSON
// lines written by bench/drain.sh) into a markdown table, one row per
// scenario with the gateways side by side.
package main

import (
	"fmt"
	"io"

	"github.com/edgegw/edgegw/bench/internal/drainresult"
	"github.com/edgegw/edgegw/bench/internal/reportcli"
)

// record is one line of drain.sh's raw output.
type record struct {
	Gateway  string `json:"gateway"`
	Scenario string `json:"scenario"`
	Exit     int    `json:"exit"`
	Gen      struct {
		drainresult.Gen
		QoS int `json:"qos"`
	} `json:"gen"`
}

func main() {
	reportcli.Tool[record]{
		Name:  "drain-report",
		Title: "edgegw drain benchmark",
		Line:  func(r *record) string { return "   " + line(*r) },
		Table: table,
	}.Main()
}

func line(r record) string {
	g := r.Gen
	s := fmt.Sprintf("%-11s %-10s backlog %5d: drained in %6.2fs (%6.0f msg/s), live p50 %6.0fms p99 %6.0fms, lost %d, QoS 2 dups %d",
		r.Scenario, r.Gateway, g.Backlog, g.DrainS, g.MsgPerS, g.LatP50us/1e3, g.LatP99us/1e3, g.Lost+g.LiveLost, g.Dups2)
	if g.LinkRate > 0 {
		s += fmt.Sprintf(", link use %.0f%%", 100*g.LinkUse)
	}
	return s + g.ErrorSuffix()
}

// tableHead explains the table and names its columns.
const tableHead = `Backlog built with the uplink down, then the link comes up; a live sensor publishes 10 msg/s meanwhile.
Upstream: Debian mosquitto, default configuration. *drain* runs from the bridge's first connection through the link to the last backlog message upstream;
*live* is the publish-to-upstream latency of live messages sent after that connection; *lost* counts backlog and live messages that never arrived.

| scenario | gateway | backlog | drain s | drain msg/s | live p50 | live p99 | lost | QoS 2 dups | dups | link use | reconnect s |
|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
`

func table(w io.Writer, title string, recs []record) {
	fmt.Fprintf(w, "# %s\n\n%s", title, tableHead)
	for _, r := range recs {
		g := r.Gen
		errs := ""
		if g.Error != "" {
			errs = " (" + g.Error + ")"
		}
		fmt.Fprintf(w, "| %s | %s | %d | %.2f | %.0f | %.0f ms | %.0f ms | %d%s | %d | %d | %s | %.1f |\n",
			r.Scenario, r.Gateway, g.Backlog, g.DrainS, g.MsgPerS, g.LatP50us/1e3, g.LatP99us/1e3,
			g.Lost+g.LiveLost, errs, g.Dups2, g.Dups, g.LinkUseCell(), g.ReconnectS)
	}
}
