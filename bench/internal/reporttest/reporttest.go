// Package reporttest helps the report tools' tests hold their output to
// a committed run's: the table and chart the tool made of bench/results'
// raw file then must come out of it again, byte for byte.
package reporttest

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgegw/edgegw/bench/internal/reportcli"
)

// SameTable reads the committed raw results at raw, makes their table
// with table under the committed table's title (its first line, as the
// script passed it with -title) and fails t unless it is the committed
// table at want. It returns the records, for the chart.
func SameTable[T any](t testing.TB, raw, want string, table func(w io.Writer, title string, recs []T)) []T {
	t.Helper()
	recs, err := reportcli.ReadFile[T](raw)
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	title, _, _ := strings.Cut(strings.TrimPrefix(string(w), "# "), "\n")
	var b strings.Builder
	table(&b, title, recs)
	if b.String() != string(w) {
		t.Fatalf("table differs from %s:\n%s", want, b.String())
	}
	return recs
}

// SameChart draws a chart with draw into a temporary file and fails t
// unless it is the committed PNG at want.
func SameChart(t testing.TB, draw func(path string) error, want string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "chart.png")
	if err := draw(path); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, w) {
		t.Fatalf("chart differs from %s", want)
	}
}
