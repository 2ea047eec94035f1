package spool

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// spooled returns a spool directory holding messages 1 to n, closed.
func spooled(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir})
	appendN(t, s, 1, n)
	s.Close()
	return dir
}

// damagedCopy copies spool directory src and writes orig, with its byte
// at off set to v, as the copy's file name; it returns the copy and the
// file's path.
func damagedCopy(t *testing.T, src, name string, orig []byte, off int, v byte) (dir, path string) {
	t.Helper()
	dir = copyDir(t, src)
	path = filepath.Join(dir, name)
	b := append([]byte(nil), orig...)
	b[off] = v
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, path
}

// A segment header holds no message: each of its 16 bytes damaged in turn
// (several values; version 0, never written, and a higher version among
// them) costs no message. The header is rewritten in place with a WARN and
// the next Open finds nothing wrong.
func TestSegmentHeaderDamageLosesNoMessage(t *testing.T) {
	const n = 30
	src := spooled(t, n)
	seg := lastSegment(t, src)
	orig, _ := os.ReadFile(seg)
	for off := range segHeaderSize {
		for _, v := range []byte{orig[off] ^ 0x5a, orig[off] ^ 0xff, 0, segVersion + 1} {
			if v == orig[off] {
				continue
			}
			t.Run(fmt.Sprintf("byte%d=%#x", off, v), func(t *testing.T) {
				dir, path := damagedCopy(t, src, filepath.Base(seg), orig, off, v)
				s, lb := openLog(t, Options{Dir: dir, Sync: SyncNone})
				es := all(t, s)
				st := s.Stats()
				s.Close()
				checkEntries(t, es, idRange(1, n))
				if st.Skipped != 0 || st.Quarantined != 0 || lb.line("WARN", "damaged segment header rewritten", path) == "" {
					t.Fatalf("stats %+v; log:\n%s", st, lb)
				}
				if got, _ := os.ReadFile(path); !bytes.Equal(got[:segHeaderSize], segHeader(1)) {
					t.Fatalf("header %x, want %x", got[:segHeaderSize], segHeader(1))
				}
				s, lb = openLog(t, Options{Dir: dir, Sync: SyncNone})
				es = all(t, s)
				s.Close()
				if len(es) != n || lb.line("WARN") != "" || lb.line("ERROR") != "" {
					t.Fatalf("second open: %d entries; log:\n%s", len(es), lb)
				}
			})
		}
	}
}

// A zeroed first flash page of a segment costs exactly the messages whose
// records start in it; every later one is served.
func TestSegmentZeroedFirstPageLosesOnlyItsMessages(t *testing.T) {
	const n, page = 300, 4096
	dir := spooled(t, n)
	seg := lastSegment(t, dir)
	b, _ := os.ReadFile(seg)
	if len(b) < 2*page {
		t.Fatalf("segment of %d bytes", len(b))
	}
	var want []ID
	for id := ID(1); id <= n; id++ {
		if off, _ := recordOffset(t, seg, 1, id); off >= page {
			want = append(want, id)
		}
	}
	clear(b[:page])
	os.WriteFile(seg, b, 0o600)
	s, lb := openLog(t, Options{Dir: dir})
	es := all(t, s)
	st := s.Stats()
	s.Close()
	t.Logf("%d messages, %d start after the zeroed page: %d served", n, len(want), len(es))
	checkEntries(t, es, want)
	if st.Skipped != int64(n-len(want)) || lb.line("WARN", "damaged segment header rewritten") == "" {
		t.Fatalf("stats %+v; log:\n%s", st, lb)
	}
}

// A segment whose header names a higher version and in which no record
// reads under this version is a newer edgegw's: Open refuses it with
// ErrUnknownVersion and leaves it byte for byte as it was.
func TestSegmentNewerVersionRefusedUntouched(t *testing.T) {
	dir := spooled(t, 10)
	seg := lastSegment(t, dir)
	b, _ := os.ReadFile(seg)
	b[4] = segVersion + 1
	for i := segHeaderSize; i < len(b); i++ {
		b[i] ^= 0xa5 // records of another format: none validates
	}
	os.WriteFile(seg, b, 0o600)
	if s, err := Open(Options{Dir: dir}); err == nil {
		s.Close()
		t.Fatal("Open accepted a newer format version")
	} else if !errors.Is(err, ErrUnknownVersion) {
		t.Fatalf("err = %v", err)
	}
	if got, err := os.ReadFile(seg); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("the newer segment was changed: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.quarantine*")); len(m) != 0 {
		t.Fatalf("moved aside: %v", m)
	}
}

// acks.log: each header byte damaged in turn (version 0 and a higher one
// among the values) costs no entry: every acked message stays acked.
func TestAckLogHeaderDamageLosesNoEntry(t *testing.T) {
	src := ackSetup(t)
	orig, _ := os.ReadFile(filepath.Join(src, ackFileName))
	for off := range ackHeaderSize {
		for _, v := range []byte{orig[off] ^ 0x5a, 0, ackVersion + 1} {
			if v == orig[off] {
				continue
			}
			dir, _ := damagedCopy(t, src, ackFileName, orig, off, v)
			s, lb := openLog(t, Options{Dir: dir, Sync: SyncNone})
			es := all(t, s)
			s.Close()
			if len(es) != 1 || lb.line("WARN", "acks.log damaged", "bad_header=true", "bad_entries=0") == "" {
				t.Fatalf("byte %d = %#x: %d entries, log:\n%s", off, v, len(es), lb)
			}
		}
	}
	t.Run("zeroed header", func(t *testing.T) {
		dir := copyDir(t, src)
		b := append([]byte(nil), orig...)
		clear(b[:ackHeaderSize])
		os.WriteFile(filepath.Join(dir, ackFileName), b, 0o600)
		s, _ := openLog(t, Options{Dir: dir, Sync: SyncNone})
		es := all(t, s)
		s.Close()
		if len(es) != 1 {
			t.Fatalf("%d entries", len(es))
		}
	})
}

// A spool with messages but nothing acked yet: acks.log holds only its
// header. A flipped bit in that version byte (2 -> 3, 6, 10, ...) names a
// higher version with no entry behind it: Open must not refuse the whole
// spool (ErrUnknownVersion) for it, as that would leave every spooled
// message upstream-less though the damage cost no acknowledgement.
func TestAckLogHeaderOnlyVersionFlipLosesNoMessage(t *testing.T) {
	const n = 20
	src := spooled(t, n)
	orig, err := os.ReadFile(filepath.Join(src, ackFileName))
	if err != nil {
		t.Fatal(err)
	}
	if len(orig) != ackHeaderSize {
		t.Fatalf("acks.log is %d bytes, not only a header", len(orig))
	}
	for bit := range 8 {
		v := orig[4] ^ 1<<bit
		t.Run(fmt.Sprintf("version=%d", v), func(t *testing.T) {
			dir, _ := damagedCopy(t, src, ackFileName, orig, 4, v)
			s, err := Open(Options{Dir: dir})
			if err != nil {
				t.Fatalf("Open: %v (acks.log holds only its header, version byte %d; %d messages spooled)", err, v, n)
			}
			es := all(t, s)
			s.Close()
			checkEntries(t, es, idRange(1, n))
		})
	}
}

// A segment holding only its header (created, then the power went before
// its first record was written) whose version byte reads higher holds no
// message of any version: Open must not refuse the spool for it.
func TestSegmentHeaderOnlyVersionFlipLosesNoMessage(t *testing.T) {
	const n = 20
	dir := spooled(t, n)
	h := segHeader(n + 1)
	h[4] = segVersion ^ 1<<3
	if err := os.WriteFile(filepath.Join(dir, segName(n+1)), h, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatalf("Open: %v (a header-only segment, version byte %d; %d messages spooled)", err, h[4], n)
	}
	es := all(t, s)
	s.Close()
	checkEntries(t, es, idRange(1, n))
}
