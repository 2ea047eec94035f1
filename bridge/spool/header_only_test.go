package spool

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// A spool with messages but nothing acked yet: acks.log holds only its
// header. A flipped bit in that version byte (2 -> 3, 6, 10, ...) names a
// higher version with no entry behind it, and Open refuses the whole spool
// (ErrUnknownVersion): every spooled message stays upstream-less, though
// the damage cost no acknowledgement.
func TestAckLogHeaderOnlyVersionFlipLosesNoMessage(t *testing.T) {
	const n = 20
	src := t.TempDir()
	s := openT(t, Options{Dir: src})
	appendN(t, s, 1, n)
	s.Close()
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
			dir := copyDir(t, src)
			b := append([]byte(nil), orig...)
			b[4] = v
			os.WriteFile(filepath.Join(dir, ackFileName), b, 0o600)
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
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir})
	appendN(t, s, 1, n)
	s.Close()
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
