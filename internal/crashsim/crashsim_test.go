package crashsim

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgegw/edgegw/internal/durable"
)

// toyLog is a small log for testing the explorer: records of
// length | crc32 | body appended to files log-0, log-1, ... (a new file
// every perFile records), each record fsynced, and a new file's
// directory entry fsynced, before it is acknowledged.
type toyLog struct {
	fs      durable.FS
	dir     string
	perFile int
	f       durable.File
	n       int
	off     int64
}

func (l *toyLog) append(body []byte) error {
	if l.n%l.perFile == 0 {
		if l.f != nil {
			l.f.Close()
		}
		f, err := l.fs.OpenFile(filepath.Join(l.dir, fmt.Sprintf("log-%d", l.n/l.perFile)), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		l.f, l.off = f, 0
		if err := l.fs.SyncDir(l.dir); err != nil {
			return err
		}
	}
	rec := binary.LittleEndian.AppendUint32(nil, uint32(len(body)))
	rec = binary.LittleEndian.AppendUint32(rec, crc32.ChecksumIEEE(body))
	rec = append(rec, body...)
	if _, err := l.f.WriteAt(rec, l.off); err != nil {
		return err
	}
	l.off += int64(len(rec))
	l.n++
	return l.f.Sync()
}

// recoverToy reads every record that checks out.
func recoverToy(dir string) (map[string]bool, error) {
	got := map[string]bool{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "log-") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		for len(b) >= 8 {
			n := int(binary.LittleEndian.Uint32(b))
			if n == 0 || 8+n > len(b) || crc32.ChecksumIEEE(b[8:8+n]) != binary.LittleEndian.Uint32(b[4:]) {
				break
			}
			got[string(b[8:8+n])] = true
			b = b[8+n:]
		}
	}
	return got, nil
}

// runToy runs the toy workload through a recorder set up by plant and
// explores its crash states: it returns the result.
func runToy(t *testing.T, plant func(*Recorder)) Result {
	t.Helper()
	work := t.TempDir()
	rec := NewRecorder(work)
	plant(rec)
	l := &toyLog{fs: rec, dir: work, perFile: 4}
	acked := map[string]int{} // body -> the mark after its append returned
	var order []string
	for i := range 14 {
		body := fmt.Sprintf("record-%02d-%s", i, bytes.Repeat([]byte{'x'}, 300*(i%3)))
		if err := l.append([]byte(body)); err != nil {
			t.Fatal(err)
		}
		acked[body] = rec.Len()
		order = append(order, body)
	}
	l.f.Close()
	tr := rec.Trace()
	res, err := Explore(tr, Options{Max: 3000, Seed: 1}, t.TempDir(), 5, func(dir string, st State) error {
		got, err := recoverToy(dir)
		if err != nil {
			return err
		}
		for _, body := range order {
			if acked[body] <= st.Crash && !got[body] {
				return fmt.Errorf("acknowledged %.9s lost", body)
			}
		}
		for body := range got {
			if _, ok := acked[body]; !ok {
				return fmt.Errorf("invented %q", body)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d states (%d distinct), %d violations", res.States, res.Distinct, len(res.Violations))
	for _, v := range res.Violations {
		t.Logf("violation: %v", v)
	}
	return res
}

// TestExplorerPassesACorrectLog: the toy log fsyncs each record and each
// new file's directory before it acknowledges: no state loses an
// acknowledged record, and the explorer built many distinct states.
func TestExplorerPassesACorrectLog(t *testing.T) {
	res := runToy(t, func(*Recorder) {})
	if len(res.Violations) != 0 {
		t.Fatalf("%d violations in a correct log", len(res.Violations))
	}
	if res.Distinct < 40 {
		t.Fatalf("only %d distinct states", res.Distinct)
	}
}

// TestExplorerCatchesAMissingDirectoryFsync: the same log without the
// directory fsync after creating a file loses acknowledged records when
// the cut drops the file's creation; the explorer must find it.
func TestExplorerCatchesAMissingDirectoryFsync(t *testing.T) {
	res := runToy(t, func(r *Recorder) { r.DropSyncDir = true })
	if len(res.Violations) == 0 {
		t.Fatal("the explorer missed a log that never fsyncs its directory")
	}
	if !strings.Contains(res.Violations[0].Err.Error(), "lost") {
		t.Fatalf("violation %v", res.Violations[0])
	}
}

// TestExplorerCatchesAckBeforeFsync: the same log acknowledging records
// it did not fsync (the fsync dropped) loses them.
func TestExplorerCatchesAckBeforeFsync(t *testing.T) {
	res := runToy(t, func(r *Recorder) { r.DropSync = func(string) bool { return true } })
	if len(res.Violations) == 0 {
		t.Fatal("the explorer missed a log that acknowledges before its fsync")
	}
}

// TestStatesOfATornWrite: a trace of one unsynced 1,500-byte write to a
// synced, created file yields, among others, the write cut at 512 and
// 1024, and zero-filled from there.
func TestStatesOfATornWrite(t *testing.T) {
	data := bytes.Repeat([]byte{'a'}, 1500)
	tr := &Trace{Ops: []Op{
		{Kind: Create, Name: "f", Inode: 1},
		{Kind: SyncDir},
		{Kind: Write, Inode: 1, Off: 0, Data: data},
	}}
	want := map[string]bool{
		"":                  false, // only the synced: empty
		string(data):        false,
		string(data[:512]):  false,
		string(data[:1024]): false,
		string(append(append([]byte(nil), data[:512]...), make([]byte, 988)...)):  false,
		string(append(append([]byte(nil), data[:1024]...), make([]byte, 476)...)): false,
		string(make([]byte, 1500)): false,
	}
	for st := range tr.States(Options{Max: 100}) {
		if st.Crash != 3 {
			continue
		}
		if _, ok := want[string(st.Files["f"])]; !ok {
			t.Errorf("unexpected state %q (%s)", st.Files["f"], st.How)
		}
		want[string(st.Files["f"])] = true
	}
	for k, seen := range want {
		if !seen {
			t.Errorf("missing state of %d bytes", len(k))
		}
	}
}

// TestStatesOfAnUnsyncedRename: a rename over a file without the
// directory fsync may be lost (the old content stays); with its data
// unsynced it may also arrive empty (the classic zero-length file).
func TestStatesOfAnUnsyncedRename(t *testing.T) {
	tr := &Trace{Ops: []Op{
		{Kind: Create, Name: "a", Inode: 1},
		{Kind: Write, Inode: 1, Data: []byte("old")},
		{Kind: Sync, Inode: 1},
		{Kind: SyncDir},
		{Kind: Create, Name: "a.tmp", Inode: 2},
		{Kind: Write, Inode: 2, Data: []byte("new")},
		{Kind: Rename, Name: "a.tmp", To: "a"},
	}}
	seen := map[string]bool{}
	for st := range tr.States(Options{Max: 100}) {
		if st.Crash == len(tr.Ops) {
			seen[string(st.Files["a"])+"|"+string(st.Files["a.tmp"])] = true
		}
	}
	for _, w := range []string{"old|", "new|", "|", "old|new"} {
		if !seen[w] {
			t.Errorf("state %q not built (built %v)", w, seen)
		}
	}
}
