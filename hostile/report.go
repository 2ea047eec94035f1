package main

// Results: one Result per attack and broker, kept raw (JSON lines) and
// rendered as a markdown table with the targets checked.

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// outcome is what an attack itself observed.
type outcome struct {
	Note        string           `json:"note"`   // one line for the table
	Counts      map[string]int64 `json:"counts"` // the raw numbers behind Note
	LeakChecked bool             `json:"leak_checked"`
	Leaks       []string         `json:"leaks,omitempty"` // each a sentence: who got what
	Err         string           `json:"error,omitempty"` // the attack could not run as designed
}

// Result is one attack against one broker.
type Result struct {
	Attack string `json:"attack"`
	Broker string `json:"broker"`

	Survived   bool   `json:"survived"`
	SurviveErr string `json:"survive_error,omitempty"`

	RSSBefore int64 `json:"rss_before"` // bytes, just before the attack
	RSSPeak   int64 `json:"rss_peak"`   // VmHWM at the end (fresh broker per attack)
	RSSEnd    int64 `json:"rss_end"`    // 1 s after the attacker left

	CPUSeconds    float64 `json:"cpu_s"`    // broker utime+stime, attack start to 1 s after
	AttackSeconds float64 `json:"attack_s"` // wall time of the attack

	P99BeforeUs     float64 `json:"p99_before_us"`
	P99DuringUs     float64 `json:"p99_during_us"`
	ProbeBefore     int     `json:"probe_before"`
	ProbeDuring     int     `json:"probe_during"`
	ProbeLostBefore int     `json:"probe_lost_before"`
	ProbeLostDuring int     `json:"probe_lost_during"`
	ProbeErr        string  `json:"probe_error,omitempty"`

	outcome
	Error string `json:"harness_error,omitempty"` // the run itself failed
}

// Ratio is the probe's p99 during the attack over its p99 before (0 when
// there is no baseline).
func (r Result) Ratio() float64 {
	if r.P99BeforeUs <= 0 {
		return 0
	}
	return r.P99DuringUs / r.P99BeforeUs
}

func (r Result) leakCell() string {
	switch {
	case !r.LeakChecked:
		return "–"
	case len(r.Leaks) > 0:
		return fmt.Sprintf("**yes** (%d)", len(r.Leaks))
	default:
		return "no"
	}
}

func (r Result) survivedCell() string {
	if r.Error != "" {
		return "error"
	}
	if r.Survived {
		return "yes"
	}
	return "**no**"
}

func mib(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

func ms(us float64) string {
	if us >= 100000 {
		return fmt.Sprintf("%.0f", us/1000)
	}
	return fmt.Sprintf("%.1f", us/1000)
}

// writeTable renders results in the order given.
func writeTable(w io.Writer, results []Result) {
	fmt.Fprintln(w, "| attack | broker | survived | RSS before → peak → end (MiB) | CPU (s) | probe p99 before → during (ms) | ratio | leaked | what happened |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		note := r.Note
		if r.Error != "" {
			note = "harness: " + r.Error
		} else if r.Err != "" {
			note += " (attack error: " + r.Err + ")"
		}
		if r.ProbeLostDuring > 0 {
			note += fmt.Sprintf("; probe lost %d/%d", r.ProbeLostDuring, r.ProbeDuring)
		}
		if r.ProbeErr != "" {
			note += "; probe: " + r.ProbeErr
		}
		if !r.Survived && r.SurviveErr != "" {
			note += "; check: " + r.SurviveErr
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s → %s → %s | %.2f | %s → %s | %.1f | %s | %s |\n",
			r.Attack, r.Broker, r.survivedCell(), mib(r.RSSBefore), mib(r.RSSPeak), mib(r.RSSEnd),
			r.CPUSeconds, ms(r.P99BeforeUs), ms(r.P99DuringUs), r.Ratio(), r.leakCell(),
			strings.ReplaceAll(note, "|", "/"))
	}
}

// target is one of issue 13's targets, judged on edgegw's results.
type target struct {
	Name  string
	Value string
	Met   bool
	Known bool // false: the results needed are missing
}

func find(results []Result, attack, broker string) (Result, bool) {
	for _, r := range results {
		if r.Attack == attack && r.Broker == broker && r.Error == "" {
			return r, true
		}
	}
	return Result{}, false
}

// targets judges the targets on edgegw's results.
func targets(results []Result) []target {
	var ts []target

	leaks := target{Name: "nothing leaks (edgegw)", Known: false}
	var leakLines []string
	for _, r := range results {
		if r.Broker == "edgegw" && r.LeakChecked {
			leaks.Known = true
			for _, l := range r.Leaks {
				leakLines = append(leakLines, r.Attack+": "+l)
			}
		}
	}
	leaks.Met = leaks.Known && len(leakLines) == 0
	leaks.Value = "no leak seen"
	if len(leakLines) > 0 {
		sort.Strings(leakLines)
		leaks.Value = strings.Join(leakLines, "; ")
	}
	ts = append(ts, leaks)

	deep := target{Name: "one client's deep filters cost < 16 MiB (RSS peak − before)"}
	if r, ok := find(results, "deep-filters", "edgegw"); ok {
		d := r.RSSPeak - r.RSSBefore
		deep.Known, deep.Met, deep.Value = true, d < 16<<20, mib(d)+" MiB"
	}
	ts = append(ts, deep)

	wp := target{Name: "wrong-password flood slows others no more than mosquitto (p99 ratio)"}
	e, ok1 := find(results, "wrong-password", "edgegw")
	m, ok2 := find(results, "wrong-password", "mosquitto")
	if ok1 && ok2 {
		wp.Known, wp.Met = true, e.Ratio() <= m.Ratio()
		wp.Value = fmt.Sprintf("edgegw %.1fx (%s → %s ms), mosquitto %.1fx (%s → %s ms)",
			e.Ratio(), ms(e.P99BeforeUs), ms(e.P99DuringUs), m.Ratio(), ms(m.P99BeforeUs), ms(m.P99DuringUs))
	}
	ts = append(ts, wp)

	lc := target{Name: "near-limit length claims cost < 0.5 s CPU"}
	if r, ok := find(results, "length-claims", "edgegw"); ok {
		lc.Known, lc.Met, lc.Value = true, r.CPUSeconds < 0.5, fmt.Sprintf("%.2f s", r.CPUSeconds)
	}
	ts = append(ts, lc)
	return ts
}

func writeTargets(w io.Writer, ts []target) {
	fmt.Fprintln(w, "| target (issue 13) | edgegw | met |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, t := range ts {
		met := "**no**"
		switch {
		case !t.Known:
			met, t.Value = "not measured", "–"
		case t.Met:
			met = "yes"
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", t.Name, strings.ReplaceAll(t.Value, "|", "/"), met)
	}
}

// worse lists the attacks where edgegw did worse than mosquitto on a
// pass/fail column (survived, leaked) or by more than 2x on CPU, probe p99
// (ratio and absolute) or RSS growth.
func worse(results []Result) []string {
	var out []string
	for _, e := range results {
		if e.Broker != "edgegw" || e.Error != "" {
			continue
		}
		m, ok := find(results, e.Attack, "mosquitto")
		if !ok {
			continue
		}
		if !e.Survived && m.Survived {
			out = append(out, e.Attack+": edgegw did not survive, mosquitto did")
		}
		if len(e.Leaks) > len(m.Leaks) {
			out = append(out, fmt.Sprintf("%s: edgegw leaked %d, mosquitto %d", e.Attack, len(e.Leaks), len(m.Leaks)))
		}
		if e.CPUSeconds > 2*m.CPUSeconds && e.CPUSeconds > 0.2 {
			out = append(out, fmt.Sprintf("%s: CPU %.2f s vs mosquitto %.2f s", e.Attack, e.CPUSeconds, m.CPUSeconds))
		}
		// The ratio alone flags a quiet baseline; the p99 during must be
		// worse in absolute terms too.
		if e.Ratio() > 2*m.Ratio() && e.Ratio() > 2 && e.P99DuringUs > 2*m.P99DuringUs {
			out = append(out, fmt.Sprintf("%s: probe p99 ratio %.1fx vs mosquitto %.1fx", e.Attack, e.Ratio(), m.Ratio()))
		}
		if e.RSSPeak-e.RSSBefore > 2*(m.RSSPeak-m.RSSBefore) && e.RSSPeak-e.RSSBefore > 16<<20 {
			out = append(out, fmt.Sprintf("%s: RSS growth %s MiB vs mosquitto %s MiB", e.Attack, mib(e.RSSPeak-e.RSSBefore), mib(m.RSSPeak-m.RSSBefore)))
		}
	}
	return out
}

// writeReport is latest.md: conditions, the table, the targets, the
// attacks where edgegw did worse, and every leak with its sentence.
func writeReport(w io.Writer, title string, results []Result) {
	fmt.Fprintf(w, "# %s\n\n", title)
	writeTable(w, results)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "## Targets")
	fmt.Fprintln(w)
	writeTargets(w, targets(results))
	fmt.Fprintln(w)
	fmt.Fprintln(w, "## edgegw worse than mosquitto")
	fmt.Fprintln(w)
	ws := worse(results)
	if len(ws) == 0 {
		fmt.Fprintln(w, "Nothing (survival, leaks, CPU > 2x, probe p99 > 2x in ratio and in ms, RSS growth > 2x and > 16 MiB).")
	}
	for _, s := range ws {
		fmt.Fprintln(w, "- "+s)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "## Leaks")
	fmt.Fprintln(w)
	n := 0
	for _, r := range results {
		for _, l := range r.Leaks {
			fmt.Fprintf(w, "- %s, %s: %s\n", r.Broker, r.Attack, l)
			n++
		}
	}
	if n == 0 {
		fmt.Fprintln(w, "None seen.")
	}
	fmt.Fprintln(w, "\nRaw numbers: latest.jsonl (one Result per line). Method: ../README.md.")
}
