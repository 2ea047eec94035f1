// Command lanes-report turns the lanes benchmark's raw results (JSON
// lines written by bench/lanes.sh) into a markdown table, one row per
// scenario and drain mode, and a chart of live latency and backlog size
// over time for both modes (image/png, no plotting library).
package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/edgegw/edgegw/bench/internal/drainresult"
	"github.com/edgegw/edgegw/bench/internal/reportcli"
)

// point is one step of a run's time series (edgegw-bench SeriesPoint).
type point struct {
	T           float64 `json:"t_s"`
	BacklogLeft int64   `json:"backlog_left"`
	LiveN       int     `json:"live_n"`
	LiveMaxMs   float64 `json:"live_max_ms"`
	LiveMeanMs  float64 `json:"live_mean_ms"`
}

// record is one line of lanes.sh's raw output.
type record struct {
	Scenario string `json:"scenario"`
	Mode     string `json:"mode"`
	Load     string `json:"load"` // /proc/loadavg's first three fields before the run
	Exit     int    `json:"exit"`
	// Ledger is edgegw's /ledger?format=json at the end of the run.
	Ledger map[string]struct {
		Accepted  int64            `json:"accepted"`
		Delivered int64            `json:"delivered"`
		InFlight  int64            `json:"in_flight"`
		Queued    int64            `json:"queued"`
		Dropped   map[string]int64 `json:"dropped"`
		Unknown   int64            `json:"unknown"`
		AddsUp    bool             `json:"adds_up"`
	} `json:"ledger"`
	Gen struct {
		drainresult.Gen
		Rate              int        `json:"rate"`
		LiveQoS           int        `json:"live_qos"`
		BuildS            float64    `json:"build_s"`
		LatMaxUs          float64    `json:"lat_max_us"`
		AlarmLatMs        float64    `json:"alarm_lat_ms"`
		AlarmAfterS       float64    `json:"alarm_after_s"`
		AlarmAtBacklog    int64      `json:"alarm_at_backlog"`
		AlarmBacklogAfter int64      `json:"alarm_backlog_after"`
		BacklogLeft       int64      `json:"backlog_left"`
		LiveLeft          int64      `json:"live_left"`
		LiveMissingSentS  [2]float64 `json:"live_missing_sent_s"`
		LiveSlow          int64      `json:"live_slow"`
		LiveSlowSentS     [2]float64 `json:"live_slow_sent_s"`
		Series            []point    `json:"series"`
	} `json:"gen"`
}

func main() {
	pngName := flag.String("png-name", "", "the chart's file name to link from the markdown")
	reportcli.Tool[record]{
		Name:  "lanes-report",
		Title: "edgegw lanes benchmark",
		Line:  func(r *record) string { return "   " + line(*r) },
		Table: func(w io.Writer, title string, recs []record) { table(w, title, recs, *pngName) },
		Chart: chart,
	}.Main()
}

// drained says how the drain ended: its time, or what was left.
func drained(r record) string {
	g := r.Gen
	if g.BacklogLeft > 0 {
		return fmt.Sprintf("not done: %d left after %.0f s (%.0f msg/s)", g.BacklogLeft, g.DrainS,
			float64(int64(g.Backlog)-g.BacklogLeft)/max(g.DrainS, 1e-9))
	}
	return fmt.Sprintf("%.1f s (%.0f msg/s)", g.DrainS, g.MsgPerS)
}

func line(r record) string {
	g := r.Gen
	s := fmt.Sprintf("%-12s %-10s backlog %d built in %.1fs: drain %s, live p50 %.0fms p99 %.0fms, alarm %.0fms, lost %d, QoS 2 dups %d, load %s",
		r.Scenario, r.Mode, g.Backlog, g.BuildS, drained(r), g.LatP50us/1e3, g.LatP99us/1e3, g.AlarmLatMs, g.Lost+g.LiveLost, g.Dups2, r.Load)
	if g.LiveLeft+g.LiveLost > 0 {
		s += fmt.Sprintf(", %d live not upstream (%d still queued at the end; sent about %.2f-%.2fs after the connection)", g.LiveLeft+g.LiveLost, g.LiveLeft, g.LiveMissingSentS[0], g.LiveMissingSentS[1])
	}
	s += ", ledger " + ledger(r)
	if g.LiveSlow > 0 {
		s += fmt.Sprintf(", %d live later than 1s (sent %.2f-%.2fs after the connection)", g.LiveSlow, g.LiveSlowSentS[0], g.LiveSlowSentS[1])
	}
	return s + g.ErrorSuffix()
}

func table(w io.Writer, title string, recs []record, png string) {
	fmt.Fprintf(w, "# %s\n\n", title)
	if len(recs) > 0 {
		g := recs[0].Gen
		link := "unlimited"
		if g.LinkRate > 0 {
			link = fmt.Sprintf("%d B/s each way", g.LinkRate)
		}
		fmt.Fprintf(w, "Backlog: %d `bulk` messages (QoS 1", g.Backlog)
		if g.QoS2Every > 0 {
			fmt.Fprintf(w, ", every %dth QoS 2", g.QoS2Every)
		}
		fmt.Fprintf(w, ") published with the uplink down; then the link (round trip %.0f ms, %s) comes up while a live sensor publishes %d msg/s at QoS %d, and an alarm (`high`) fires mid-drain.\n",
			g.RTTms, link, g.Rate, g.LiveQoS)
	}
	fmt.Fprintln(w, "Upstream: Debian mosquitto, default configuration; edgegw built as shipped (static). Scenario *bulk-lane*: the live sensor's topic is in the `bulk` lane with the backlog;")
	fmt.Fprintln(w, "*normal-lane*: in `normal`. *live* is the publish-to-upstream latency of live messages sent after the bridge's connection through the link; *drain* runs from that connection")
	fmt.Fprintln(w, "to the last backlog message upstream; *live > 1 s*: how many live messages took longer than a second, and when (after that connection) they were sent; *alarm*: its publish to its arrival upstream (*backlog meanwhile*: backlog messages that arrived in between); *lost*: backlog and live messages never seen upstream (a drain cut short by the time limit leaves messages queued, not lost: *live still queued*, and the ledger's *queued*).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scenario | drain | load | backlog built in | drain | live p50 | live p99 | live max | live > 1 s (sent at) | alarm | backlog meanwhile | lost | live still queued (sent at) | dups (QoS 2) | link use | ledger: accepted = delivered + in flight + queued + dropped + unknown |")
	fmt.Fprintln(w, "|---|---|---|---:|---|---:|---:|---:|---|---:|---:|---:|---|---:|---:|---|")
	for _, r := range recs {
		g := r.Gen
		alarm := "—"
		if g.AlarmLatMs > 0 {
			alarm = fmt.Sprintf("%.0f ms (at %.1f s)", g.AlarmLatMs, g.AlarmAfterS)
		}
		slow := "0"
		if g.LiveSlow > 0 {
			slow = fmt.Sprintf("%d (%.2f–%.2f s)", g.LiveSlow, g.LiveSlowSentS[0], g.LiveSlowSentS[1])
		}
		left := "0"
		if g.LiveLeft > 0 {
			left = fmt.Sprintf("%d (%.2f–%.2f s)", g.LiveLeft, g.LiveMissingSentS[0], g.LiveMissingSentS[1])
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.1f s | %s | %s | %s | %s | %s | %s | %d | %d | %s | %d (%d) | %s | %s |\n",
			r.Scenario, r.Mode, r.Load, g.BuildS, drained(r), ms(g.LatP50us), ms(g.LatP99us), ms(g.LatMaxUs), slow, alarm, g.AlarmBacklogAfter,
			g.Lost+g.LiveLost, left, g.Dups, g.Dups2, g.LinkUseCell(), ledger(r))
	}
	for _, r := range recs {
		if r.Gen.Error != "" && r.Gen.BacklogLeft == 0 {
			fmt.Fprintf(w, "\n%s/%s: %s\n", r.Scenario, r.Mode, r.Gen.Error)
		}
	}
	if png != "" {
		fmt.Fprintf(w, "\n![live latency and backlog over time](%s)\n\n", png)
		fmt.Fprintln(w, "Chart: one column per scenario. Top: the highest latency of the live messages that arrived in each 250 ms (log scale, 0.01 to 100 s; with fifo in the backlog's lane they all arrive after it), and a bar at the alarm's publication as high as its latency;")
		fmt.Fprintln(w, "bottom: backlog messages not yet upstream. x: seconds after the bridge's connection through the link. Orange: `drain: fifo`; blue: `drain: live-first`.")
	}
}

// ledger is the bridge's equation at the end of the run.
func ledger(r record) string {
	l, ok := r.Ledger["cloud"]
	if !ok {
		return "—"
	}
	var dropped int64
	for _, n := range l.Dropped {
		dropped += n
	}
	verdict := "adds up"
	if !l.AddsUp {
		verdict = "DOES NOT ADD UP"
	}
	return fmt.Sprintf("%d = %d + %d + %d + %d + %d, %s", l.Accepted, l.Delivered, l.InFlight, l.Queued, dropped, l.Unknown, verdict)
}

func ms(us float64) string {
	if us >= 10e6 {
		return fmt.Sprintf("%.1f s", us/1e6)
	}
	return fmt.Sprintf("%.0f ms", us/1e3)
}
