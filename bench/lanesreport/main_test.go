package main

import (
	"io"
	"testing"

	"github.com/edgegw/edgegw/bench/internal/reporttest"
)

// TestReportReproducesResults: the table and the chart of a committed
// run's raw results are the committed ones, byte for byte. A deliberate
// change of either updates the committed files.
func TestReportReproducesResults(t *testing.T) {
	const run = "../results/lanes-2026-12-01-164648"
	recs := reporttest.SameTable(t, "../results/lanes-raw-2026-12-01-164648.jsonl", run+".md",
		func(w io.Writer, title string, recs []record) { table(w, title, recs, "lanes-2026-12-01-164648.png") })
	reporttest.SameChart(t, func(path string) error { return chart(path, recs) }, run+".png")
}
