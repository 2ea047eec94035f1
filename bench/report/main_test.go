package main

import (
	"io"
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
