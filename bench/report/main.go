// Command report turns the raw results of bench/run.sh (one JSON object per
// scenario and broker) into the comparison table (markdown) and a bar chart
// (PNG, standard library only); with -floor the Go floor table of
// bench/floor.sh instead. With -line it prints a one-line summary of
// the single record on stdin (for run.sh's progress output).
package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/edgegw/edgegw/bench/internal/pngdraw"
	"github.com/edgegw/edgegw/bench/internal/reportcli"
)

type gen struct {
	Scenario    string  `json:"scenario"`
	Sent        int64   `json:"sent"`
	Received    int64   `json:"received"`
	Lost        int64   `json:"lost"`
	Dups        int64   `json:"dups"`
	MsgPerS     float64 `json:"msg_per_s"`
	SendPerS    float64 `json:"send_per_s"`
	LatP50us    float64 `json:"lat_p50_us"`
	LatP99us    float64 `json:"lat_p99_us"`
	LatP999us   float64 `json:"lat_p999_us"`
	Established int64   `json:"established"`
	Failed      int64   `json:"failed"`
	ElapsedS    float64 `json:"elapsed_s"`
	Cycles      int     `json:"cycles"`
	Pass        *bool   `json:"pass"`
	Error       string  `json:"error"`
	Acked       int64   `json:"acked"`
	Skipped     int64   `json:"skipped"`
	UpReceived  int64   `json:"up_received"`
	UpLost      int64   `json:"up_lost"`
	UpLatP50us  float64 `json:"up_lat_p50_us"`
	UpLatP99us  float64 `json:"up_lat_p99_us"`
}

type record struct {
	Broker    string `json:"broker"`
	Scenario  string `json:"scenario"`
	Exit      int    `json:"exit"`
	CPUus     int64  `json:"cpu_us"`
	WallUs    int64  `json:"wall_us"` // the time CPUus and Vcsw were sampled over
	Vcsw      int64  `json:"vcsw"`    // voluntary context switches, all threads
	RSSBefore int64  `json:"rss_before"`
	RSSReady  int64  `json:"rss_ready"`
	RSSPeak   int64  `json:"rss_peak"`
	RSSEnd    int64  `json:"rss_end"`
	Gen       gen    `json:"gen"`
}

// figure is one row of the table: a value per broker, and which way is better.
type figure struct {
	name   string
	unit   string
	higher bool // higher is better
	get    func(r *record) (float64, bool)
}

func cpuPerMsg(r *record) (float64, bool) {
	if r.Gen.Received == 0 {
		return 0, false
	}
	return float64(r.CPUus) / float64(r.Gen.Received), true
}

// cpuPct is the broker's CPU time over the sampled wall time, % of one core.
func cpuPct(r *record) (float64, bool) {
	if r.WallUs <= 0 {
		return 0, false
	}
	return 100 * float64(r.CPUus) / float64(r.WallUs), true
}

// wakeups is voluntary context switches per second: how often the broker
// slept and was woken.
func wakeups(r *record) (float64, bool) {
	if r.WallUs <= 0 {
		return 0, false
	}
	return float64(r.Vcsw) / (float64(r.WallUs) / 1e6), true
}

func lostPct(r *record) (float64, bool) {
	exp := r.Gen.Received + r.Gen.Lost
	if exp == 0 {
		return 0, false
	}
	return 100 * float64(r.Gen.Lost) / float64(exp), true
}

func streamFigures() []figure {
	return []figure{
		{"delivered", "msg/s", true, func(r *record) (float64, bool) { return r.Gen.MsgPerS, r.Gen.Received > 0 }},
		{"accepted from publishers", "msg/s", true, func(r *record) (float64, bool) { return r.Gen.SendPerS, r.Gen.Sent > 0 }},
		{"lost (dropped by broker)", "%", false, lostPct},
		{"latency p50", "µs", false, func(r *record) (float64, bool) { return r.Gen.LatP50us, r.Gen.Received > 0 }},
		{"latency p99", "µs", false, func(r *record) (float64, bool) { return r.Gen.LatP99us, r.Gen.Received > 0 }},
		{"broker CPU per delivered msg", "µs", false, cpuPerMsg},
	}
}

func figuresFor(scenario string) []figure {
	switch {
	case strings.HasPrefix(scenario, "latency"):
		return []figure{
			{"delivered", "msg/s", true, func(r *record) (float64, bool) { return r.Gen.MsgPerS, r.Gen.Received > 0 }},
			{"lost", "%", false, lostPct},
			{"latency p50", "µs", false, func(r *record) (float64, bool) { return r.Gen.LatP50us, r.Gen.Received > 0 }},
			{"latency p99", "µs", false, func(r *record) (float64, bool) { return r.Gen.LatP99us, r.Gen.Received > 0 }},
			{"latency p99.9", "µs", false, func(r *record) (float64, bool) { return r.Gen.LatP999us, r.Gen.Received > 0 }},
			{"broker CPU per delivered msg", "µs", false, cpuPerMsg},
			{"broker wakeups", "/s", false, wakeups},
		}
	case scenario == "sensors", scenario == "sensors-local":
		figs := []figure{
			{"delivered to the local subscriber", "msg/s", true, func(r *record) (float64, bool) { return r.Gen.MsgPerS, r.Gen.Received > 0 }},
			{"lost locally + upstream", "msgs", false, func(r *record) (float64, bool) { return float64(r.Gen.Lost + r.Gen.UpLost), r.Gen.Sent > 0 }},
			{"broker CPU", "% of a core", false, cpuPct},
			{"broker CPU per message", "µs", false, cpuPerMsg},
			{"broker wakeups", "/s", false, wakeups},
			{"RSS (1,000 sensors, steady)", "MiB", false, func(r *record) (float64, bool) { return mib(r.RSSReady), r.RSSReady > 0 }},
			{"latency to local subscriber p50", "µs", false, func(r *record) (float64, bool) { return r.Gen.LatP50us, r.Gen.Received > 0 }},
			{"latency to local subscriber p99", "µs", false, func(r *record) (float64, bool) { return r.Gen.LatP99us, r.Gen.Received > 0 }},
			{"latency through the bridge p50", "µs", false, func(r *record) (float64, bool) { return r.Gen.UpLatP50us, r.Gen.UpReceived > 0 }},
			{"latency through the bridge p99", "µs", false, func(r *record) (float64, bool) { return r.Gen.UpLatP99us, r.Gen.UpReceived > 0 }},
		}
		if scenario == "sensors-local" {
			return figs[:len(figs)-2] // no bridge
		}
		return figs
	case scenario == "idle":
		return []figure{
			{"connections established", "", true, func(r *record) (float64, bool) { return float64(r.Gen.Established), true }},
			{"RSS per idle connection", "B", false, func(r *record) (float64, bool) {
				if r.Gen.Established == 0 || r.RSSReady == 0 {
					return 0, false
				}
				return float64(r.RSSReady-r.RSSBefore) / float64(r.Gen.Established), true
			}},
			{"RSS with all connections", "MiB", false, func(r *record) (float64, bool) { return mib(r.RSSReady), r.RSSReady > 0 }},
		}
	case scenario == "slowsub":
		return []figure{
			{"publisher accepted (QoS 1, 4 KiB)", "msg/s", true, func(r *record) (float64, bool) { return r.Gen.SendPerS, r.Gen.Sent > 0 }},
			{"RSS before", "MiB", false, func(r *record) (float64, bool) { return mib(r.RSSBefore), true }},
			{"RSS peak", "MiB", false, func(r *record) (float64, bool) { return mib(r.RSSPeak), true }},
			{"RSS end", "MiB", false, func(r *record) (float64, bool) { return mib(r.RSSEnd), true }},
			{"subscriber connections", "", true, func(r *record) (float64, bool) { return float64(r.Gen.Cycles), true }},
		}
	case scenario == "bidir-qos2":
		return []figure{
			{"pass (exactly once, in order)", "1=yes", true, func(r *record) (float64, bool) {
				if r.Gen.Pass != nil && *r.Gen.Pass {
					return 1, true
				}
				return 0, true
			}},
			{"time to complete", "s", false, func(r *record) (float64, bool) { return r.Gen.ElapsedS, r.Gen.Pass != nil && *r.Gen.Pass }},
		}
	}
	return streamFigures()
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func format(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// table groups records by scenario (in first-seen order) and broker.
type table struct {
	scenarios []string
	edge      string // label of the edgegw column
	by        map[string]map[string]*record
}

func newTable(recs []record) *table {
	t := &table{edge: "edgegw", by: map[string]map[string]*record{}}
	for i := range recs {
		r := &recs[i]
		if r.Broker != "mosquitto" {
			t.edge = r.Broker
		}
		if t.by[r.Scenario] == nil {
			t.by[r.Scenario] = map[string]*record{}
			t.scenarios = append(t.scenarios, r.Scenario)
		}
		t.by[r.Scenario][r.Broker] = r
	}
	return t
}

func (t *table) value(sc, broker string, f figure) (float64, bool) {
	r := t.by[sc][broker]
	if r == nil {
		return 0, false
	}
	return f.get(r)
}

func (t *table) markdown(w io.Writer, title string) {
	fmt.Fprintf(w, "# %s\n\n", title)
	fmt.Fprintf(w, "Ratio = %s / mosquitto. ✓ marks the better broker for that figure (higher or lower is better, see the arrow).\n\n", t.edge)
	fmt.Fprintf(w, "| scenario | figure | %s | mosquitto | ratio |\n|---|---|---:|---:|---:|\n", t.edge)
	for _, sc := range t.scenarios {
		for _, f := range figuresFor(sc) {
			e, eok := t.value(sc, t.edge, f)
			m, mok := t.value(sc, "mosquitto", f)
			arrow := "↓"
			if f.higher {
				arrow = "↑"
			}
			name := f.name + " " + arrow
			if f.unit != "" {
				name += " (" + f.unit + ")"
			}
			es, ms, ratio := "–", "–", "–"
			if eok {
				es = format(e)
			}
			if mok {
				ms = format(m)
			}
			if eok && mok && m != 0 {
				ratio = fmt.Sprintf("%.2f", e/m)
				if (e > m) == f.higher && e != m {
					ratio += " ✓"
				}
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", sc, name, es, ms, ratio)
		}
	}
	var notes []string
	for _, sc := range t.scenarios {
		for _, b := range []string{t.edge, "mosquitto"} {
			if r := t.by[sc][b]; r != nil && (r.Gen.Error != "" || r.Exit != 0 || r.Gen.Dups > 0) {
				notes = append(notes, fmt.Sprintf("- %s / %s: exit %d, dups %d, %s", sc, b, r.Exit, r.Gen.Dups, r.Gen.Error))
			}
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "\nProblems reported by the generator:\n\n%s\n", strings.Join(notes, "\n"))
	}
	fmt.Fprintf(w, "\nChart (latest.png): left, delivered msg/s of the fan-in/fan-out scenarios; right, p99 latency of the latency scenarios; "+
		"blue = %s, orange = mosquitto, each pair scaled to its larger bar; the digits above a pair are the ratio.\n", t.edge)
}

func line(r *record) string {
	g := &r.Gen
	s := fmt.Sprintf("%.0f msg/s, p50 %.0fµs p99 %.0fµs, sent %d recv %d lost %d, cpu %.2fs",
		g.MsgPerS, g.LatP50us, g.LatP99us, g.Sent, g.Received, g.Lost, float64(r.CPUus)/1e6)
	switch r.Scenario {
	case "idle":
		s = fmt.Sprintf("%d established, rss %.1f→%.1f MiB", g.Established, mib(r.RSSBefore), mib(r.RSSReady))
	case "slowsub":
		s = fmt.Sprintf("sent %d (%.0f/s), %d sub connections, rss %.1f peak %.1f end %.1f MiB",
			g.Sent, g.SendPerS, g.Cycles, mib(r.RSSBefore), mib(r.RSSPeak), mib(r.RSSEnd))
	case "bidir-qos2":
		s = fmt.Sprintf("pass %v in %.2fs", g.Pass != nil && *g.Pass, g.ElapsedS)
	case "sensors", "sensors-local":
		pct, _ := cpuPct(r)
		wk, _ := wakeups(r)
		us, _ := cpuPerMsg(r)
		s = fmt.Sprintf("sent %d recv %d up %d lost %d+%d, cpu %.1f%% %.1fµs/msg, %.0f wakeups/s, rss %.1f MiB, p50/p99 %.0f/%.0fµs, bridged %.0f/%.0fµs",
			g.Sent, g.Received, g.UpReceived, g.Lost, g.UpLost, pct, us, wk, mib(r.RSSReady), g.LatP50us, g.LatP99us, g.UpLatP50us, g.UpLatP99us)
	}
	if g.Error != "" {
		s += " [" + g.Error + "]"
	}
	return s
}

func main() {
	floor := flag.Bool("floor", false, "the Go floor table of bench/floor.sh: CPU % per round and median, per broker")
	reportcli.Tool[record]{
		Name:     "report",
		Title:    "edgegw benchmark",
		Line:     line,
		NoRecord: "(no result)",
		Table: func(w io.Writer, title string, recs []record) {
			if *floor {
				floorTable(w, title, recs)
				return
			}
			newTable(recs).markdown(w, title)
		},
		Chart: func(path string, recs []record) error { return newTable(recs).chart(path) },
	}.Main()
}

// Chart: two panels of bar pairs, drawn with bench/internal/pngdraw.

// Bar colours: edgegw blue, mosquitto orange.
var (
	colEdge = pngdraw.Blue
	colMosq = pngdraw.Orange
)

func (t *table) chart(path string) error {
	const w, h, top, bottom, pad = 1000, 360, 40, 320, 30
	img := pngdraw.New(w, h)
	type pair struct{ e, m float64 }
	var left, right []pair
	thr := figure{get: func(r *record) (float64, bool) { return r.Gen.MsgPerS, r.Gen.Received > 0 }}
	p99 := figure{get: func(r *record) (float64, bool) { return r.Gen.LatP99us, r.Gen.Received > 0 }}
	for _, sc := range t.scenarios {
		var f figure
		switch {
		case strings.HasPrefix(sc, "fanin"), strings.HasPrefix(sc, "fanout"):
			f = thr
		case strings.HasPrefix(sc, "latency"):
			f = p99
		default:
			continue
		}
		e, _ := t.value(sc, t.edge, f)
		m, _ := t.value(sc, "mosquitto", f)
		if strings.HasPrefix(sc, "latency") {
			right = append(right, pair{e, m})
		} else {
			left = append(left, pair{e, m})
		}
	}
	panel := func(x0, x1 int, ps []pair) {
		pngdraw.Fill(img, x0, bottom, x1, bottom+2, pngdraw.Axis)
		pngdraw.Fill(img, x0, top, x0+2, bottom, pngdraw.Axis)
		if len(ps) == 0 {
			return
		}
		slot := (x1 - x0 - pad) / len(ps)
		bw := slot / 3
		for i, p := range ps {
			mx := math.Max(p.e, p.m)
			if mx <= 0 {
				continue
			}
			x := x0 + pad + i*slot
			he := int(float64(bottom-top-30) * p.e / mx)
			hm := int(float64(bottom-top-30) * p.m / mx)
			pngdraw.Fill(img, x, bottom-he, x+bw, bottom, colEdge)
			pngdraw.Fill(img, x+bw, bottom-hm, x+2*bw, bottom, colMosq)
			if p.m > 0 {
				pngdraw.Text(img, x, top-10, 3, fmt.Sprintf("%.2fx", p.e/p.m))
			}
		}
	}
	panel(10, w/2-10, left)
	panel(w/2+10, w-10, right)
	pngdraw.Fill(img, 10, h-25, 25, h-10, colEdge)
	pngdraw.Fill(img, 40, h-25, 55, h-10, colMosq)
	return pngdraw.Save(path, img)
}
