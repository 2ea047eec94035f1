package durable

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestReplace: the new content is the file's, the temporary file is
// gone, the returned file is open on the new content, and the meter
// counts the bytes and both fsyncs (file and directory).
func TestReplace(t *testing.T) {
	for name, dir := range dirs(t) {
		t.Run(name, func(t *testing.T) {
			path, tmp := filepath.Join(dir, "x.log"), filepath.Join(dir, "x.log.tmp")
			if err := os.WriteFile(path, []byte("old content"), 0o600); err != nil {
				t.Fatal(err)
			}
			var m Meter
			f, installed, err := Replace(OS{}, tmp, path, []byte("new"), true, &m)
			if err != nil || !installed {
				t.Fatal(installed, err)
			}
			defer f.Close()
			if b, _ := os.ReadFile(path); string(b) != "new" {
				t.Fatalf("content %q", b)
			}
			if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("tmp left: %v", err)
			}
			if _, err := f.Write([]byte("+more")); err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(path); string(b) != "new+more" {
				t.Fatalf("the returned file is not the new one: %q", b)
			}
			if m.Bytes() != 3 || m.Syncs() != 2 {
				t.Fatalf("meter: %d bytes, %d syncs", m.Bytes(), m.Syncs())
			}
			var none Meter
			g, _, err := Replace(OS{}, tmp, path, []byte("unsynced"), false, &none)
			if err != nil {
				t.Fatal(err)
			}
			g.Close()
			if none.Syncs() != 0 || none.Bytes() != 8 {
				t.Fatalf("without sync: %d bytes, %d syncs", none.Bytes(), none.Syncs())
			}
		})
	}
}

// TestReplaceFailureLeavesTheOldFile: a rename that fails (the target is
// a non-empty directory) removes the temporary file and keeps the old.
func TestReplaceFailureLeavesTheOldFile(t *testing.T) {
	dir := t.TempDir()
	path, tmp := filepath.Join(dir, "d"), filepath.Join(dir, "d.tmp")
	if err := os.MkdirAll(filepath.Join(path, "child"), 0o700); err != nil {
		t.Fatal(err)
	}
	f, installed, err := Replace(OS{}, tmp, path, []byte("x"), true, nil)
	if err == nil || installed || f != nil {
		t.Fatalf("Replace over a directory: %v, %v, %v", f, installed, err)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("tmp left: %v", err)
	}
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		t.Fatalf("old entry: %v, %v", fi, err)
	}
}
