// Package reportcli is the command line the benchmark report tools share
// (bench/report, bench/drainreport, bench/lanesreport): their scripts
// write one JSON object per run to a raw file (JSON lines); a tool turns
// the file into a markdown table (and a chart), or with -line the one
// record on stdin into a progress line.
package reportcli

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// maxLine bounds a raw record: a lanes record carries its time series.
const maxLine = 16 << 20

// Tool is one report tool over records of type T.
type Tool[T any] struct {
	Name  string // the command's name, before its error messages
	Title string // the default -title
	// Line is the -line summary of a record.
	Line func(r *T) string
	// NoRecord is what -line prints when stdin holds no record it can
	// read; empty: that is an error (exit 1).
	NoRecord string
	// Table writes the markdown.
	Table func(w io.Writer, title string, recs []T)
	// Chart, if set, is drawn with -png.
	Chart func(path string, recs []T) error
}

// Main parses the command line (flag.CommandLine: a tool may add its own
// flags before) and does what it asks; it exits on an error.
func (t Tool[T]) Main() {
	in := flag.String("in", "", "raw results (JSON lines)")
	md := flag.String("md", "", "write the markdown table here")
	latest := flag.String("latest", "", "and a copy here")
	var pngOut *string
	if t.Chart != nil {
		pngOut = flag.String("png", "", "write the chart here")
	}
	title := flag.String("title", t.Title, "table title")
	oneLine := flag.Bool("line", false, "summarise the one record on stdin")
	flag.Parse()
	if *oneLine {
		recs, err := Read[T](os.Stdin, "stdin")
		if err == nil && len(recs) == 0 {
			err = errors.New("stdin: no record")
		}
		switch {
		case err == nil:
			fmt.Println(t.Line(&recs[0]))
		case t.NoRecord != "":
			fmt.Println(t.NoRecord)
		default:
			t.fail(err)
		}
		return
	}
	recs, err := ReadFile[T](*in)
	if err != nil {
		t.fail(err)
	}
	var b strings.Builder
	t.Table(&b, *title, recs)
	if err := WriteMarkdown(os.Stdout, b.String(), *md, *latest); err != nil {
		t.fail(err)
	}
	if pngOut != nil && *pngOut != "" {
		if err := t.Chart(*pngOut, recs); err != nil {
			t.fail(fmt.Errorf("chart: %w", err))
		}
	}
}

func (t Tool[T]) fail(err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", t.Name, err)
	os.Exit(1)
}

// WriteMarkdown writes text to each path that is not empty, or to stdout
// if none is.
func WriteMarkdown(stdout io.Writer, text string, paths ...string) error {
	wrote := false
	for _, p := range paths {
		if p == "" {
			continue
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			return err
		}
		wrote = true
	}
	if !wrote {
		_, err := io.WriteString(stdout, text)
		return err
	}
	return nil
}

// ReadFile reads the raw results at path.
func ReadFile[T any](path string) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Read[T](f, path)
}

// Read reads one record per line from r (name in its errors); blank
// lines are skipped.
func Read[T any](r io.Reader, name string) ([]T, error) {
	var recs []T
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for n := 1; sc.Scan(); n++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var rec T
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return recs, nil
}
