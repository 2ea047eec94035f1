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
// the table's first line). A deliberate change of either updates the
// committed files.
func TestReportReproducesResults(t *testing.T) {
	const stamp = "2026-12-01-164648"
	recs, err := reportcli.ReadFile[record]("../results/lanes-raw-" + stamp + ".jsonl")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../results/lanes-" + stamp + ".md")
	if err != nil {
		t.Fatal(err)
	}
	title, _, _ := strings.Cut(strings.TrimPrefix(string(want), "# "), "\n")
	var b strings.Builder
	table(&b, title, recs, "lanes-"+stamp+".png")
	if b.String() != string(want) {
		t.Fatalf("table differs from lanes-%s.md:\n%s", stamp, b.String())
	}
	png := filepath.Join(t.TempDir(), "chart.png")
	if err := chart(png, recs); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(png)
	if err != nil {
		t.Fatal(err)
	}
	wantPNG, err := os.ReadFile("../results/lanes-" + stamp + ".png")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, wantPNG) {
		t.Fatalf("chart differs from lanes-%s.png", stamp)
	}
}
