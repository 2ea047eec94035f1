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
