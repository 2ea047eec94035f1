//go:build linux

package spool

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/edgegw/edgegw/internal/testutil"
)

// TestOpenOnFullDisk is issue 12 point 3: persistence.dir is full and the
// spool intact. Open succeeds and serves what it holds, acks work, an
// append fails with ErrNoSpace without failing the spool, and once space is
// free appends succeed again and the owed acks checkpoint is written.
func TestOpenOnFullDisk(t *testing.T) {
	for _, mode := range []SyncMode{SyncBatch, SyncAlways, SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := filepath.Join(testutil.MountTmpfs(t, "512k", 0), "spool")
			opts := Options{Dir: dir, Sync: mode, SegmentSize: 16 << 10}
			s := openT(t, opts)
			appendN(t, s, 1, 200)
			for id := ID(1); id <= 20; id++ {
				s.Ack(id)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			filler := testutil.FillDisk(t, filepath.Dir(dir))

			s, lb := openLog(t, opts)
			defer s.Close()
			checkEntries(t, all(t, s), idRange(21, 200))
			// The segment's last page may have room for a few records.
			n := 200
			var err error
			for ; n < 300; n++ {
				if _, err = s.Append(context.Background(), testMsg(n+1)); err != nil {
					break
				}
			}
			if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("Append on a full disk: %v", err)
			}
			t.Logf("append on a full disk: %v (%d fitted in the last page)", err, n-200)
			done := make(chan error, 1)
			s.AppendAsync(testMsg(n+1), func(_ ID, err error) { done <- err })
			if err := <-done; !errors.Is(err, ErrNoSpace) {
				t.Fatalf("AppendAsync on a full disk: %v", err)
			}
			// Still serving: Next, Ack.
			id, m, err := s.Next(context.Background(), 0)
			if err != nil || id != 21 || !equalMsg(m, testMsg(21)) {
				t.Fatalf("Next = %d, %v", id, err)
			}
			for id := ID(21); id <= 40; id++ {
				if err := s.Ack(id); err != nil {
					t.Fatal(err)
				}
			}
			flushNow(s)
			if st := s.Stats(); st.NoSpace != 2 || st.Messages != int64(n-40) {
				t.Fatalf("stats %+v", st)
			}

			os.Remove(filler)
			n++
			if id, err := s.Append(context.Background(), testMsg(n)); err != nil || id != ID(n) {
				t.Fatalf("Append after space came back = %d, %v", id, err)
			}
			flushNow(s) // the owed checkpoint
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if lb.line("ERROR") != "" {
				t.Fatalf("log:\n%s", lb)
			}
			s = openT(t, opts)
			checkEntries(t, all(t, s), idRange(41, ID(n)))
			if st := s.Stats(); st.AckDamage != 0 || st.IDGap != 0 {
				t.Fatalf("reopen: %+v", st)
			}
		})
	}
}

// TestDiskFillsWhileOpen: the disk fills up under a running spool (the
// next segment cannot be created, then a record does not fit); appends
// are refused, nothing stored is lost, and appends resume once acks free
// a segment.
func TestDiskFillsWhileOpen(t *testing.T) {
	dir := filepath.Join(testutil.MountTmpfs(t, "128k", 0), "spool")
	opts := Options{Dir: dir, SegmentSize: 8 << 10, Sync: SyncNone}
	s := openT(t, opts)
	var ids []ID
	for i := 1; ; i++ {
		id, err := s.Append(context.Background(), testMsg(i))
		if err != nil {
			if !errors.Is(err, ErrNoSpace) {
				t.Fatalf("Append %d: %v", i, err)
			}
			break
		}
		ids = append(ids, id)
		if i > 100000 {
			t.Fatal("the disk never filled")
		}
	}
	t.Logf("%d messages fit", len(ids))
	checkEntries(t, all(t, s), ids)
	// Ack the oldest half: their segments go, the space comes back.
	for _, id := range ids[:len(ids)/2] {
		s.Ack(id)
	}
	flushNow(s)
	id, err := s.Append(context.Background(), testMsg(len(ids)+1))
	if err != nil || id != ID(len(ids)+1) {
		t.Fatalf("Append after acks freed space = %d, %v", id, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, opts)
	checkEntries(t, all(t, s), append(ids[len(ids)/2:], id))
}

// TestOpenErrors: a spool that cannot be used at all fails Open with an
// *OpenError naming the step and the path, so the caller can report it and
// keep the rest of the gateway running.
func TestOpenErrors(t *testing.T) {
	t.Run("dir-is-a-file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "spool")
		os.WriteFile(path, nil, 0o600)
		checkOpenError(t, path, "create directory", syscall.ENOTDIR)
	})
	t.Run("acks-log-is-a-directory", func(t *testing.T) {
		dir := t.TempDir()
		os.Mkdir(filepath.Join(dir, ackFileName), 0o700)
		checkOpenError(t, dir, "read", syscall.EISDIR)
	})
	t.Run("segment-is-a-directory", func(t *testing.T) {
		dir := t.TempDir()
		os.Mkdir(filepath.Join(dir, segName(1)), 0o700)
		checkOpenError(t, dir, "open segment", nil)
	})
	t.Run("read-only-mount", func(t *testing.T) {
		mnt := testutil.MountTmpfs(t, "256k", 0)
		dir := filepath.Join(mnt, "spool")
		s := openT(t, Options{Dir: dir})
		appendN(t, s, 1, 3)
		s.Close()
		if err := syscall.Mount("tmpfs", mnt, "tmpfs", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
			t.Fatalf("remount read-only: %v", err)
		}
		checkOpenError(t, dir, "lock", syscall.EROFS)
	})
	t.Run("locked", func(t *testing.T) {
		dir := t.TempDir()
		openT(t, Options{Dir: dir})
		checkOpenError(t, dir, "lock", ErrLocked)
	})
}

func checkOpenError(t *testing.T, dir, op string, is error) {
	t.Helper()
	s, err := Open(Options{Dir: dir})
	if err == nil {
		s.Close()
		t.Fatal("Open succeeded")
	}
	var oe *OpenError
	if !errors.As(err, &oe) || oe.Op != op || oe.Dir != dir || is != nil && !errors.Is(err, is) {
		t.Fatalf("err = %#v (%v), want an *OpenError for %q wrapping %v", err, err, op, is)
	}
	t.Logf("%v", err)
}
