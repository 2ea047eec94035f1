package reportcli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type rec struct {
	Name string `json:"name"`
	N    int    `json:"n"`
}

func TestRead(t *testing.T) {
	recs, err := Read[rec](strings.NewReader("{\"name\":\"a\",\"n\":1}\n\n  \n{\"name\":\"b\",\"n\":2}\n"), "raw")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0] != (rec{"a", 1}) || recs[1] != (rec{"b", 2}) {
		t.Fatalf("read %+v", recs)
	}
	// A record as long as a lanes run's time series still reads.
	long := `{"name":"` + strings.Repeat("x", 2<<20) + `"}`
	if recs, err := Read[rec](strings.NewReader(long), "raw"); err != nil || len(recs[0].Name) != 2<<20 {
		t.Fatalf("long record: %v", err)
	}
	_, err = Read[rec](strings.NewReader("{\"n\":1}\n{\"n\":\n"), "raw")
	if err == nil || !strings.HasPrefix(err.Error(), "raw:2: ") {
		t.Fatalf("bad line: error %v, want it to name raw:2", err)
	}
}

func TestWriteMarkdown(t *testing.T) {
	dir := t.TempDir()
	md, latest := filepath.Join(dir, "a.md"), filepath.Join(dir, "latest.md")
	var stdout bytes.Buffer
	if err := WriteMarkdown(&stdout, "# t\n", md, latest); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{md, latest} {
		if b, err := os.ReadFile(p); err != nil || string(b) != "# t\n" {
			t.Fatalf("%s: %q %v", p, b, err)
		}
	}
	if stdout.Len() != 0 {
		t.Fatalf("wrote files and stdout: %q", stdout.String())
	}
	if err := WriteMarkdown(&stdout, "# t\n", "", ""); err != nil || stdout.String() != "# t\n" {
		t.Fatalf("no file: stdout %q, %v", stdout.String(), err)
	}
	if err := WriteMarkdown(&stdout, "# t\n", filepath.Join(dir, "missing", "x.md")); err == nil {
		t.Fatal("a file in a missing directory: no error")
	}
}
