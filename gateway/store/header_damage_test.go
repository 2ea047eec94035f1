package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgegw/edgegw/internal/testutil"
)

// writeRetained writes n retained messages (topics r/0000 ...) with
// payloads of size bytes and closes the store; it returns the file's bytes.
func writeRetained(t *testing.T, dir string, n, size int) []byte {
	t.Helper()
	s, _, err := Open(Options{Dir: dir, Sync: SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		s.RetainSet(Msg{Topic: fmt.Sprintf("r/%04d", i), Payload: bytes.Repeat([]byte{'p'}, size), Retain: true})
	}
	s.Close()
	b, err := os.ReadFile(filepath.Join(dir, logName))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// recordStarts returns the offset of each record in a clean file.
func recordStarts(t *testing.T, b []byte) []int {
	t.Helper()
	var offs []int
	for off := headerSize; off < len(b); {
		body, ok := frameAt(b, off)
		if !ok {
			t.Fatalf("clean file unreadable at %d", off)
		}
		offs = append(offs, off)
		off += recHeaderSize + len(body)
	}
	return offs
}

// openLogged opens dir with its log captured.
func openLogged(t *testing.T, dir string) (*Store, *State, *testutil.LogBuffer) {
	t.Helper()
	var lb testutil.LogBuffer
	s, st, err := Open(Options{Dir: dir, Sync: SyncNone, Log: lb.Logger()})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, st, &lb
}

// The 8-byte header holds no record: a flipped or overwritten header byte
// (each in turn, several values, version 0 and a higher version among
// them) costs no record. The header is rewritten in place with a WARN, the
// file is not moved aside, and the next Open finds nothing wrong.
func TestHeaderDamageLosesNoRecord(t *testing.T) {
	const n = 50
	orig := writeRetained(t, t.TempDir(), n, 20)
	for off := range headerSize {
		for _, v := range []byte{orig[off] ^ 0x5a, orig[off] ^ 0xff, 0, formatVersion + 1} {
			if v == orig[off] {
				continue
			}
			t.Run(fmt.Sprintf("byte%d=%#x", off, v), func(t *testing.T) {
				dir := t.TempDir()
				b := append([]byte(nil), orig...)
				b[off] = v
				os.WriteFile(filepath.Join(dir, logName), b, 0o600)
				s, st, lb := openLogged(t, dir)
				if len(st.Retained) != n || quarantined(t, dir) != 0 || s.Stats().SkippedRecords != 0 {
					t.Fatalf("%d of %d retained, %d moved aside, stats %+v; log:\n%s",
						len(st.Retained), n, quarantined(t, dir), s.Stats(), lb)
				}
				reserved := off >= 5 // not read: nothing to repair
				if warned := strings.Contains(lb.String(), "level=WARN") && strings.Contains(lb.String(), "header rewritten"); warned == reserved {
					t.Fatalf("WARN %v for byte %d; log:\n%s", warned, off, lb)
				}
				s.Close()
				got, _ := os.ReadFile(filepath.Join(dir, logName))
				if !bytes.Equal(got[:5], fileHeader()[:5]) {
					t.Fatalf("header not repaired: %x", got[:headerSize])
				}
				s2, st2, lb2 := openLogged(t, dir)
				if len(st2.Retained) != n || strings.Contains(lb2.String(), "level=WARN") || strings.Contains(lb2.String(), "level=ERROR") || s2.Stats().SkippedRecords != 0 {
					t.Fatalf("second open: %d retained; log:\n%s", len(st2.Retained), lb2)
				}
			})
		}
	}
}

// A zeroed first flash page (header and the records in it) costs exactly
// the records that start in the page: every record after it is read.
func TestZeroedFirstPageLosesOnlyItsRecords(t *testing.T) {
	const n, page = 100, 4096
	orig := writeRetained(t, t.TempDir(), n, 200) // ~230 bytes a record: ~18 in the page
	starts := recordStarts(t, orig)
	if len(starts) != n || len(orig) < 2*page {
		t.Fatalf("%d records in %d bytes", len(starts), len(orig))
	}
	want := map[string]bool{}
	for i, off := range starts {
		if off >= page {
			want[fmt.Sprintf("r/%04d", i)] = true
		}
	}
	dir := t.TempDir()
	b := append([]byte(nil), orig...)
	clear(b[:page])
	os.WriteFile(filepath.Join(dir, logName), b, 0o600)
	s, st, lb := openLogged(t, dir)
	got := map[string]bool{}
	for _, m := range st.Retained {
		got[m.Topic] = true
	}
	t.Logf("%d records, %d start after the zeroed page, %d read back", n, len(want), len(got))
	if len(got) != len(want) {
		t.Fatalf("%d retained, want %d; log:\n%s", len(got), len(want), lb)
	}
	for topic := range want {
		if !got[topic] {
			t.Fatalf("%s lost, though it starts after the zeroed page", topic)
		}
	}
	if s.Stats().SkippedRecords != 1 || quarantined(t, dir) != 1 || !strings.Contains(lb.String(), "level=ERROR") {
		t.Fatalf("stats %+v, moved aside %d; log:\n%s", s.Stats(), quarantined(t, dir), lb)
	}
}

// A file whose header names a higher version and in which no record reads
// under this version is a newer edgegw's: it is not guessed at. It is moved
// aside byte for byte as it was (the broker starts empty; Open never fails
// because of the file's content) and the log says it is a newer format.
func TestNewerVersionWithUnreadableRecordsMovedAsideUntouched(t *testing.T) {
	orig := writeRetained(t, t.TempDir(), 20, 20)
	b := append([]byte(nil), orig...)
	b[4] = formatVersion + 1
	for _, off := range recordStarts(t, orig) {
		// Each record's CRC no longer holds: records of another format.
		binary.LittleEndian.PutUint32(b[off+4:], binary.LittleEndian.Uint32(b[off+4:])^0xdeadbeef)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, logName), b, 0o600)
	_, st, lb := openLogged(t, dir)
	if len(st.Retained) != 0 || !strings.Contains(lb.String(), fmt.Sprintf("format version %d", formatVersion+1)) {
		t.Fatalf("%d retained; log:\n%s", len(st.Retained), lb)
	}
	m, _ := filepath.Glob(filepath.Join(dir, logName+".corrupt-*"))
	if len(m) != 1 {
		t.Fatalf("moved aside: %v", m)
	}
	if kept, _ := os.ReadFile(m[0]); !bytes.Equal(kept, b) {
		t.Fatal("the newer file was changed")
	}
}
