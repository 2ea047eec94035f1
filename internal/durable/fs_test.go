package durable

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// tmpfsDir is a directory on a tmpfs mount (/dev/shm), where fsync is
// a no-op the kit must still call without error.
func tmpfsDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/dev/shm", "durable-test-")
	if err != nil {
		t.Fatalf("tmpfs: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func dirs(t *testing.T) map[string]string {
	return map[string]string{"disk": t.TempDir(), "tmpfs": tmpfsDir(t)}
}

// TestLockIsExclusive: a second Lock of the same file fails with
// ErrLocked (flock is per open file, so this holds within one process
// too) until the first is closed.
func TestLockIsExclusive(t *testing.T) {
	for name, dir := range dirs(t) {
		t.Run(name, func(t *testing.T) {
			var fs FS = OS{}
			p := filepath.Join(dir, "LOCK")
			a, err := fs.Lock(p)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fs.Lock(p); !errors.Is(err, ErrLocked) {
				t.Fatalf("second lock: %v, want ErrLocked", err)
			}
			a.Close()
			b, err := fs.Lock(p)
			if err != nil {
				t.Fatalf("lock after release: %v", err)
			}
			b.Close()
		})
	}
}

// TestOSFileOperations: each operation of the seam does what the os
// package does, on a real directory and on tmpfs.
func TestOSFileOperations(t *testing.T) {
	for name, dir := range dirs(t) {
		t.Run(name, func(t *testing.T) {
			var fs FS = OS{}
			sub := filepath.Join(dir, "a", "b")
			if err := fs.MkdirAll(sub, 0o700); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(sub, "f")
			f, err := fs.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fs.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); !errors.Is(err, os.ErrExist) {
				t.Fatalf("O_EXCL on an existing file: %v", err)
			}
			if _, err := f.Write([]byte("hello world")); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte("W"), 6); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(7); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 16)
			n, err := f.ReadAt(buf, 0)
			if err != io.EOF || string(buf[:n]) != "hello W" {
				t.Fatalf("ReadAt: %q, %v", buf[:n], err)
			}
			f.Close()
			if err := fs.SyncDir(sub); err != nil {
				t.Fatal(err)
			}
			q := filepath.Join(sub, "g")
			if err := fs.Rename(p, q); err != nil {
				t.Fatal(err)
			}
			if b, err := fs.ReadFile(q); err != nil || string(b) != "hello W" {
				t.Fatalf("ReadFile after rename: %q, %v", b, err)
			}
			if _, err := fs.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("old name after rename: %v", err)
			}
			if fi, err := fs.Lstat(q); err != nil || fi.Size() != 7 {
				t.Fatalf("Lstat: %v, %v", fi, err)
			}
			ents, err := fs.ReadDir(sub)
			if err != nil || len(ents) != 1 || ents[0].Name() != "g" {
				t.Fatalf("ReadDir: %v, %v", ents, err)
			}
			if err := fs.Remove(q); err != nil {
				t.Fatal(err)
			}
			if err := fs.SyncDir(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("SyncDir of a missing directory: %v", err)
			}
			if _, err := fs.OpenFile(q, os.O_RDONLY, 0); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("open of a removed file: %v", err)
			}
		})
	}
}

func TestOrDefaultsToOS(t *testing.T) {
	if _, ok := Or(nil).(OS); !ok {
		t.Fatal("Or(nil) is not OS")
	}
	var fs FS = OS{}
	if Or(fs) != fs {
		t.Fatal("Or(fs) is not fs")
	}
}
