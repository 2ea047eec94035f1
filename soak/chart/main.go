// Command soak-chart reads the CSV written by soak/run.sh, prints the
// summary, writes a short Markdown note and a PNG chart (RSS and queued
// bytes over time, with memory_budget and max_queued_bytes as lines), and
// judges the run. Standard library only. See soak/README.md.
//
//	soak-chart -csv soak/results/latest.csv -png latest.png -md latest.md \
//	    -budget 67108864 -max-queued-bytes 4194304 [-gen edgegw=gen.json]
//
// Exit status: 0 pass, 1 a check failed, 2 bad input.
package main

import (
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
)

// The CSV columns soak/run.sh writes; an empty field is "not sampled"
// (mosquitto has no metrics; a failed scrape leaves its fields empty).
var columns = []string{
	"broker", "t_s", "phase", "rss_bytes", "heap_inuse_bytes",
	"queued_bytes", "queued_messages", "inflight_messages",
	"sessions_connected", "sessions_disconnected", "connections",
	"drops_queue_full", "drops_memory_budget", "drops_expired", "drops_too_large",
	"sessions_expired_total", "takeovers_total", "received_total", "sent_total",
}

var dropReasons = []string{"queue_full", "memory_budget", "expired", "too_large"}

type sample struct {
	t     float64
	phase string
	v     map[string]float64 // numeric columns that were present
}

func (s sample) get(k string) (float64, bool) { v, ok := s.v[k]; return v, ok }

type genResult struct {
	Sent     int64   `json:"sent"`
	Acked    int64   `json:"acked"`
	Received int64   `json:"received"`
	SendPerS float64 `json:"send_per_s"`
	Cycles   int     `json:"cycles"`
	ElapsedS float64 `json:"elapsed_s"`
	Error    string  `json:"error"`
}

type series struct {
	broker  string
	samples []sample
	gen     *genResult
	genErr  string
}

type genFlags map[string]string

func (g genFlags) String() string { return fmt.Sprint(map[string]string(g)) }
func (g genFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("want broker=file")
	}
	g[k] = v
	return nil
}

type settings struct {
	budget, maxQueuedBytes, msgSize float64
	maxQueued, maxInflight          float64
	expectExpired                   float64
	duration, expiry, title         string
}

func main() {
	var (
		in, pngOut, mdOut string
		st                settings
		gens              = genFlags{}
	)
	flag.StringVar(&in, "csv", "soak/results/latest.csv", "input CSV from soak/run.sh")
	flag.StringVar(&pngOut, "png", "", "write the chart here")
	flag.StringVar(&mdOut, "md", "", "write the Markdown summary here")
	flag.Float64Var(&st.budget, "budget", 64<<20, "limits.memory_budget in bytes")
	flag.Float64Var(&st.maxQueuedBytes, "max-queued-bytes", 4<<20, "limits.max_queued_bytes in bytes")
	flag.Float64Var(&st.maxQueued, "max-queued-messages", 1000, "limits.max_queued_messages")
	flag.Float64Var(&st.maxInflight, "max-inflight", 32, "limits.max_inflight")
	flag.Float64Var(&st.msgSize, "msg-size", 4096, "payload bytes of one message (the allowance over memory_budget)")
	flag.StringVar(&st.duration, "duration", "", "load duration (for the title)")
	flag.StringVar(&st.expiry, "expiry", "", "sessions.max_expiry (for the title)")
	flag.StringVar(&st.title, "title", "edgegw soak: field report 002 (slowsub)", "chart and note title")
	flag.Float64Var(&st.expectExpired, "expect-expired", 0, "at least this many sessions must have expired by the end (the script's probe)")
	flag.Var(gens, "gen", "broker=file: the generator's --json result for that broker (repeatable)")
	flag.Parse()

	all, err := readCSV(in)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak-chart:", err)
		os.Exit(2)
	}
	for _, s := range all {
		if f, ok := gens[s.broker]; ok {
			s.gen, s.genErr = readGen(f)
		}
	}
	rep := summarize(all, st)
	rep.print(os.Stdout)
	if mdOut != "" {
		f, err := os.Create(mdOut)
		if err == nil {
			rep.markdown(f, pngOut)
			err = f.Close()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "soak-chart:", err)
			os.Exit(2)
		}
	}
	if pngOut != "" {
		if err := drawChart(pngOut, all, st, rep); err != nil {
			fmt.Fprintln(os.Stderr, "soak-chart:", err)
			os.Exit(2)
		}
	}
	if !rep.pass {
		os.Exit(1)
	}
}

func readCSV(path string) ([]*series, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	head, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	idx := map[string]int{}
	for i, h := range head {
		idx[h] = i
	}
	for _, c := range []string{"broker", "t_s", "phase", "rss_bytes"} {
		if _, ok := idx[c]; !ok {
			return nil, fmt.Errorf("%s: no column %q", path, c)
		}
	}
	var out []*series
	by := map[string]*series{}
	for line := 2; ; line++ {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		field := func(c string) string {
			if i, ok := idx[c]; ok && i < len(rec) {
				return strings.TrimSpace(rec[i])
			}
			return ""
		}
		t, err := strconv.ParseFloat(field("t_s"), 64)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: t_s: %w", path, line, err)
		}
		s := sample{t: t, phase: field("phase"), v: map[string]float64{}}
		for _, c := range columns[3:] {
			if x := field(c); x != "" {
				if v, err := strconv.ParseFloat(x, 64); err == nil {
					s.v[c] = v
				}
			}
		}
		b := field("broker")
		if by[b] == nil {
			by[b] = &series{broker: b}
			out = append(out, by[b])
		}
		by[b].samples = append(by[b].samples, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no samples", path)
	}
	return out, nil
}

func readGen(path string) (*genResult, string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err.Error()
	}
	var g genResult
	if err := json.Unmarshal(b, &g); err != nil {
		return nil, fmt.Sprintf("generator output unreadable: %v", err)
	}
	return &g, ""
}

// figures are one broker's numbers; NaN = not available.
type figures struct {
	broker                       string
	samples, scraped             int
	loadStart, loadEnd, end      float64
	baseRSS, peakRSS, endRSS     float64
	peakRSSAt                    float64
	baseHeap, peakHeap, endHeap  float64
	peakQB, peakQBAt, peakQM     float64
	peakInflight                 float64
	endQB, endQM                 float64
	endConn, endDisc, endConns   float64
	maxSessions                  float64
	drops                        map[string]float64
	expired, takeovers, received float64
	sent                         float64
	hasMetrics, aliveAtEnd       bool
	gen                          *genResult
	genErr                       string
}

type check struct {
	ok   bool
	what string
}

type report struct {
	st     settings
	figs   []*figures
	checks []check
	notes  []string
	pass   bool
}

func nan() float64 { return math.NaN() }

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return nan()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func figuresOf(s *series) *figures {
	f := &figures{broker: s.broker, samples: len(s.samples), gen: s.gen, genErr: s.genErr,
		loadStart: nan(), loadEnd: nan(), drops: map[string]float64{}}
	var baseRSS, baseHeap []float64
	f.peakRSS, f.peakHeap, f.peakQB, f.peakQM, f.peakInflight, f.maxSessions = nan(), nan(), nan(), nan(), nan(), nan()
	maxOf := func(cur, v float64) float64 {
		if math.IsNaN(cur) || v > cur {
			return v
		}
		return cur
	}
	for _, x := range s.samples {
		if x.phase == "load" {
			if math.IsNaN(f.loadStart) {
				f.loadStart = x.t
			}
			f.loadEnd = x.t
		}
		if v, ok := x.get("rss_bytes"); ok {
			if x.phase == "baseline" {
				baseRSS = append(baseRSS, v)
			}
			if math.IsNaN(f.peakRSS) || v > f.peakRSS {
				f.peakRSS, f.peakRSSAt = v, x.t
			}
		}
		if v, ok := x.get("heap_inuse_bytes"); ok {
			if x.phase == "baseline" {
				baseHeap = append(baseHeap, v)
			}
			f.peakHeap = maxOf(f.peakHeap, v)
		}
		if v, ok := x.get("queued_bytes"); ok {
			f.scraped++
			f.hasMetrics = true
			if math.IsNaN(f.peakQB) || v > f.peakQB {
				f.peakQB, f.peakQBAt = v, x.t
			}
		}
		if v, ok := x.get("queued_messages"); ok {
			f.peakQM = maxOf(f.peakQM, v)
		}
		if v, ok := x.get("inflight_messages"); ok {
			f.peakInflight = maxOf(f.peakInflight, v)
		}
		c, ok1 := x.get("sessions_connected")
		d, ok2 := x.get("sessions_disconnected")
		if ok1 && ok2 {
			f.maxSessions = maxOf(f.maxSessions, c+d)
		}
	}
	last := s.samples[len(s.samples)-1]
	f.end = last.t
	g := func(k string) float64 {
		if v, ok := last.get(k); ok {
			return v
		}
		return nan()
	}
	f.baseRSS, f.baseHeap = median(baseRSS), median(baseHeap)
	if math.IsNaN(f.baseRSS) {
		if v, ok := s.samples[0].get("rss_bytes"); ok {
			f.baseRSS = v
		}
	}
	f.endRSS, f.endHeap = g("rss_bytes"), g("heap_inuse_bytes")
	f.endQB, f.endQM = g("queued_bytes"), g("queued_messages")
	f.endConn, f.endDisc, f.endConns = g("sessions_connected"), g("sessions_disconnected"), g("connections")
	for _, r := range dropReasons {
		f.drops[r] = g("drops_" + r)
	}
	f.expired, f.takeovers = g("sessions_expired_total"), g("takeovers_total")
	f.received, f.sent = g("received_total"), g("sent_total")
	_, f.aliveAtEnd = last.get("rss_bytes")
	return f
}

func summarize(all []*series, st settings) *report {
	rep := &report{st: st, pass: true}
	add := func(ok bool, format string, a ...any) {
		rep.checks = append(rep.checks, check{ok, fmt.Sprintf(format, a...)})
		if !ok {
			rep.pass = false
		}
	}
	for _, s := range all {
		f := figuresOf(s)
		rep.figs = append(rep.figs, f)
		if f.genErr != "" {
			rep.notes = append(rep.notes, fmt.Sprintf("%s: generator: %s", f.broker, f.genErr))
		} else if f.gen != nil && f.gen.Error != "" {
			rep.notes = append(rep.notes, fmt.Sprintf("%s: generator reported: %s", f.broker, f.gen.Error))
		}
		if f.broker != "edgegw" {
			continue // RSS comparison only
		}
		add(f.hasMetrics, "edgegw /metrics was scraped (%d of %d samples)", f.scraped, f.samples)
		if missing := f.samples - f.scraped; f.hasMetrics && missing > 0 {
			rep.notes = append(rep.notes, fmt.Sprintf("edgegw: %d samples without metrics (scrape failed or timed out)", missing))
		}
		add(f.aliveAtEnd && !math.IsNaN(f.endQB), "edgegw still running and answering /metrics at the end")
		if !f.hasMetrics {
			continue
		}
		limit := st.budget + st.msgSize
		add(f.peakQB <= limit, "peak queued bytes %s <= memory_budget %s + one message (%s)", mib(f.peakQB), mib(st.budget), kib(st.msgSize))
		sess := f.endConn + f.endDisc
		add(sess == 0, "sessions at the end = 0 (connected %s, disconnected %s)", num(f.endConn), num(f.endDisc))
		add(f.endQB == 0, "queued bytes at the end = 0 (%s; %s messages)", num(f.endQB), num(f.endQM))
		if st.expectExpired > 0 {
			add(f.expired >= st.expectExpired, "sessions expired by max_expiry >= %s (%s): the probe's persistent session expired", num(st.expectExpired), num(f.expired))
		}
		perSession := st.maxQueuedBytes + st.maxInflight*st.msgSize
		if f.peakQB > perSession {
			rep.notes = append(rep.notes, fmt.Sprintf("edgegw: peak queued bytes %s is above one session's bound (max_queued_bytes %s + max_inflight %d x %s = %s): more than one session held messages at once",
				mib(f.peakQB), mib(st.maxQueuedBytes), int(st.maxInflight), kib(st.msgSize), mib(perSession)))
		}
	}
	return rep
}

func mib(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f MiB", v/(1<<20))
}

func kib(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.0f KiB", v/1024)
}

func num(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func secs(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.0fs", v)
}

// rows are the figures table: label, then one value per broker.
func (r *report) rows() [][]string {
	var out [][]string
	row := func(label string, val func(*figures) string) {
		line := []string{label}
		for _, f := range r.figs {
			line = append(line, val(f))
		}
		out = append(out, line)
	}
	metric := func(f *figures, s string) string {
		if !f.hasMetrics {
			return "-"
		}
		return s
	}
	row("load (s from start)", func(f *figures) string {
		return fmt.Sprintf("%s-%s of %s", secs(f.loadStart), secs(f.loadEnd), secs(f.end))
	})
	row("publisher", func(f *figures) string {
		if f.gen == nil {
			return "n/a"
		}
		return fmt.Sprintf("%d sent (%.0f msg/s), %d acked", f.gen.Sent, f.gen.SendPerS, f.gen.Acked)
	})
	row("subscriber", func(f *figures) string {
		if f.gen == nil {
			return "n/a"
		}
		return fmt.Sprintf("%d connections, %d received, 0 acked", f.gen.Cycles, f.gen.Received)
	})
	row("RSS baseline", func(f *figures) string { return mib(f.baseRSS) })
	row("RSS peak", func(f *figures) string { return fmt.Sprintf("%s (t=%s)", mib(f.peakRSS), secs(f.peakRSSAt)) })
	row("RSS end", func(f *figures) string { return mib(f.endRSS) })
	row("Go heap in use baseline / peak / end", func(f *figures) string {
		return metric(f, fmt.Sprintf("%s / %s / %s", mib(f.baseHeap), mib(f.peakHeap), mib(f.endHeap)))
	})
	row("queued bytes peak", func(f *figures) string {
		return metric(f, fmt.Sprintf("%s (t=%s); budget %s, per session %s", mib(f.peakQB), secs(f.peakQBAt), mib(r.st.budget), mib(r.st.maxQueuedBytes)))
	})
	row("queued messages peak", func(f *figures) string {
		return metric(f, fmt.Sprintf("%s (limit %s per session); in-flight peak %s", num(f.peakQM), num(r.st.maxQueued), num(f.peakInflight)))
	})
	row("drops by reason", func(f *figures) string {
		var parts []string
		for _, k := range dropReasons {
			parts = append(parts, k+" "+num(f.drops[k]))
		}
		return metric(f, strings.Join(parts, ", "))
	})
	row("sessions peak / end", func(f *figures) string {
		return metric(f, fmt.Sprintf("%s / %s (connected %s, disconnected %s)", num(f.maxSessions), num(f.endConn+f.endDisc), num(f.endConn), num(f.endDisc)))
	})
	row("queued at the end", func(f *figures) string {
		return metric(f, fmt.Sprintf("%s bytes, %s messages", num(f.endQB), num(f.endQM)))
	})
	row("sessions expired / takeovers", func(f *figures) string {
		return metric(f, fmt.Sprintf("%s / %s", num(f.expired), num(f.takeovers)))
	})
	row("messages received / sent by broker", func(f *figures) string {
		return metric(f, fmt.Sprintf("%s / %s", num(f.received), num(f.sent)))
	})
	return out
}

func (r *report) verdict() string {
	if r.pass {
		return "PASS"
	}
	return "FAIL"
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "== %s\n", r.st.title)
	rows := r.rows()
	lw := 0
	for _, row := range rows {
		lw = max(lw, len(row[0]))
	}
	for _, f := range r.figs {
		fmt.Fprintf(w, "-- %s\n", f.broker)
		for _, row := range rows {
			i := 1 + indexOf(r.figs, f)
			fmt.Fprintf(w, "   %-*s  %s\n", lw, row[0], row[i])
		}
	}
	fmt.Fprintln(w, "-- checks")
	for _, c := range r.checks {
		mark := "ok  "
		if !c.ok {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "   %s %s\n", mark, c.what)
	}
	for _, n := range r.notes {
		fmt.Fprintf(w, "   note: %s\n", n)
	}
	fmt.Fprintf(w, "== %s\n", r.verdict())
}

func indexOf(fs []*figures, f *figures) int {
	for i, x := range fs {
		if x == f {
			return i
		}
	}
	return -1
}

func (r *report) markdown(w io.Writer, png string) {
	fmt.Fprintf(w, "# %s: %s\n\n", r.st.title, r.verdict())
	fmt.Fprintf(w, "Load %s per broker; limits: max_queued_messages %s, max_queued_bytes %s, memory_budget %s, max_inflight %s; sessions.max_expiry %s. Method: soak/README.md.\n\n",
		r.st.duration, num(r.st.maxQueued), mib(r.st.maxQueuedBytes), mib(r.st.budget), num(r.st.maxInflight), r.st.expiry)
	fmt.Fprint(w, "| |")
	for _, f := range r.figs {
		fmt.Fprintf(w, " %s |", f.broker)
	}
	fmt.Fprint(w, "\n|---|")
	for range r.figs {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for _, row := range r.rows() {
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
	fmt.Fprintln(w, "\nChecks:")
	fmt.Fprintln(w)
	for _, c := range r.checks {
		mark := "ok"
		if !c.ok {
			mark = "**FAIL**"
		}
		fmt.Fprintf(w, "- %s: %s\n", mark, c.what)
	}
	for _, n := range r.notes {
		fmt.Fprintf(w, "- note: %s\n", n)
	}
	if png != "" {
		name := png[strings.LastIndex(png, "/")+1:]
		fmt.Fprintf(w, "\n![RSS and queued bytes over time](%s)\n", name)
	}
}
