package main

import (
	"testing"

	"github.com/edgegw/edgegw/bench/internal/reporttest"
)

// TestTableReproducesResults: the table of a committed run's raw results
// is the committed table, byte for byte. A deliberate change of the
// format updates the committed file.
func TestTableReproducesResults(t *testing.T) {
	reporttest.SameTable(t, "../results/drain-raw-2026-12-01-165832.jsonl", "../results/drain-2026-12-01-165832.md", table)
}
