package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgegw/edgegw/bench/internal/reportcli"
)

// TestReportReproducesResults: the table and the chart of a committed
// run's raw results are the committed ones, byte for byte (the title is
// the table's first line; run.sh keeps only latest.png, so the chart of
// this run, once latest.png, is kept in testdata). A deliberate change of
// either updates the committed files.
func TestReportReproducesResults(t *testing.T) {
	const stamp = "2026-12-01-154909"
	recs, err := reportcli.ReadFile[record]("../results/raw-" + stamp + ".jsonl")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../results/" + stamp + ".md")
	if err != nil {
		t.Fatal(err)
	}
	title, _, _ := strings.Cut(strings.TrimPrefix(string(want), "# "), "\n")
	var b strings.Builder
	newTable(recs).markdown(&b, title)
	if b.String() != string(want) {
		t.Fatalf("table differs from %s.md:\n%s", stamp, b.String())
	}
	png := filepath.Join(t.TempDir(), "chart.png")
	if err := newTable(recs).chart(png); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(png)
	if err != nil {
		t.Fatal(err)
	}
	wantPNG, err := os.ReadFile("testdata/chart-" + stamp + ".png")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, wantPNG) {
		t.Fatalf("chart differs from testdata/chart-%s.png", stamp)
	}
}
