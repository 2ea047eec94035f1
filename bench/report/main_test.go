package main

import (
	"io"
	"strings"
	"testing"

	"github.com/edgegw/edgegw/bench/internal/reporttest"
)

// TestReportReproducesResults: the table and the chart of a committed
// run's raw results are the committed ones, byte for byte (run.sh keeps
// only latest.png, so this run's chart, once latest.png, is kept in
// testdata). A deliberate change of either updates the committed files.
func TestReportReproducesResults(t *testing.T) {
	recs := reporttest.SameTable(t, "../results/raw-2026-12-01-154909.jsonl", "../results/2026-12-01-154909.md",
		func(w io.Writer, title string, recs []record) { newTable(recs).markdown(w, title) })
	reporttest.SameChart(t, newTable(recs).chart, "testdata/chart-2026-12-01-154909.png")
}

// TestFloorReproducesResults: the -floor table of the committed
// bench/floor.sh run is the committed one (bench/README.md quotes it).
func TestFloorReproducesResults(t *testing.T) {
	reporttest.SameTable(t, "../results/floor-raw-2026-12-01-230300.jsonl", "../results/floor-2026-12-01-230300.md", floorTable)
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
		ok   bool
	}{
		{nil, 0, false},
		{[]float64{3}, 3, true},
		{[]float64{3, 1, 2}, 2, true},
		{[]float64{4, 1, 3, 2}, 2.5, true},
	} {
		if got, ok := median(c.in); got != c.want || ok != c.ok {
			t.Errorf("median(%v) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// TestFloorTableWithoutMosquitto: an A/B of two builds (bench/ab.sh) has
// no mosquitto; its ratios are to the first build's median.
func TestFloorTableWithoutMosquitto(t *testing.T) {
	rec := func(b string, cpu int64) record {
		return record{Broker: b, Scenario: "sensors", CPUus: cpu, WallUs: 1e6}
	}
	var b strings.Builder
	floorTable(&b, "ab", []record{rec("old", 100000), rec("new", 80000), rec("old", 120000), rec("new", 90000), rec("old", 110000), rec("new", 70000)})
	for _, want := range []string{"× old", "| sensors | old | 10.00, 12.00, 11.00 | 11.00 | 1.00 |", "| sensors | new | 8.00, 9.00, 7.00 | 8.00 | 0.73 |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}
