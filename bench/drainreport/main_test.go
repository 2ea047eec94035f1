package main

import (
	"os"
	"strings"
	"testing"

	"github.com/edgegw/edgegw/bench/internal/reportcli"
)

// TestTableReproducesResults: the table of a committed run's raw results
// is the committed table, byte for byte (its title is the file's first
// line). A deliberate change of the format updates the committed file.
func TestTableReproducesResults(t *testing.T) {
	const stamp = "2026-12-01-165832"
	recs, err := reportcli.ReadFile[record]("../results/drain-raw-" + stamp + ".jsonl")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../results/drain-" + stamp + ".md")
	if err != nil {
		t.Fatal(err)
	}
	title, _, _ := strings.Cut(strings.TrimPrefix(string(want), "# "), "\n")
	var b strings.Builder
	table(&b, title, recs)
	if b.String() != string(want) {
		t.Fatalf("table differs from drain-%s.md:\n%s", stamp, b.String())
	}
}
