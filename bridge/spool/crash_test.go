package spool

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// copyDir copies the spool files (not LOCK) of src into a new directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == lockFileName {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func lastSegment(t *testing.T, dir string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "*"+segSuffix))
	if len(m) == 0 {
		t.Fatal("no segment")
	}
	sort.Strings(m)
	return m[len(m)-1]
}

// TestCorruptTail damages the last record of the last segment in every way a
// torn write or bit rot can (cut at every byte, flip every byte): Open must
// keep every earlier record, count the tail, leave a clean spool, and not
// hand out the lost record's ID again (it may be in flight upstream).
func TestCorruptTail(t *testing.T) {
	const n = 12
	src := t.TempDir()
	s := openT(t, Options{Dir: src, SegmentSize: 256}) // a few segments
	appendN(t, s, 1, n)
	s.Ack(2)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	last := testMsg(n)
	recLen := int64(recOverhead + len(last.Topic) + len(last.Payload))
	fi, err := os.Stat(lastSegment(t, src))
	if err != nil {
		t.Fatal(err)
	}
	start := fi.Size() - recLen
	var want []ID
	for id := ID(1); id < n; id++ {
		if id != 2 {
			want = append(want, id)
		}
	}

	check := func(t *testing.T, dir string, wantCorrupt int64) {
		t.Helper()
		s, err := Open(Options{Dir: dir, Sync: SyncNone}) // fast; Open's checks are the same
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		got := all(t, s)
		st := s.Stats()
		id, aerr := s.Append(context.Background(), testMsg(99))
		s.Close()
		if fmt.Sprint(entryIDs(got)) != fmt.Sprint(want) {
			t.Fatalf("recovered %v, want %v", entryIDs(got), want)
		}
		for _, e := range got {
			if !equalMsg(e.Message, testMsg(int(e.ID))) {
				t.Fatalf("entry %d damaged", e.ID)
			}
		}
		if st.CorruptTail != wantCorrupt {
			t.Fatalf("CorruptTail = %d, want %d", st.CorruptTail, wantCorrupt)
		}
		if aerr != nil || id != n+1 {
			t.Fatalf("Append after recovery = %d, %v; want %d", id, aerr, n+1)
		}
		// The repair is permanent: a second Open finds nothing wrong.
		s, err = Open(Options{Dir: dir, Sync: SyncNone})
		if err != nil {
			t.Fatal(err)
		}
		st = s.Stats()
		got = all(t, s)
		s.Close()
		if st.CorruptTail != 0 || len(got) != len(want)+1 {
			t.Fatalf("second open: %d entries, stats %+v", len(got), st)
		}
	}

	for cut := start; cut < fi.Size(); cut++ {
		t.Run(fmt.Sprintf("cut%d", cut-start), func(t *testing.T) {
			dir := copyDir(t, src)
			if err := os.Truncate(lastSegment(t, dir), cut); err != nil {
				t.Fatal(err)
			}
			check(t, dir, min(cut-start, 1))
		})
	}
	for off := start; off < fi.Size(); off++ {
		t.Run(fmt.Sprintf("flip%d", off-start), func(t *testing.T) {
			dir := copyDir(t, src)
			path := lastSegment(t, dir)
			b, _ := os.ReadFile(path)
			b[off] ^= 0x5a
			os.WriteFile(path, b, 0o600)
			check(t, dir, 1)
		})
	}
	t.Run("garbage", func(t *testing.T) {
		dir := copyDir(t, src)
		f, _ := os.OpenFile(lastSegment(t, dir), os.O_RDWR, 0)
		f.Truncate(start)
		f.WriteAt(bytes.Repeat([]byte{0xff}, 100), start)
		f.Close()
		check(t, dir, 1)
	})
	t.Run("torn-new-segment", func(t *testing.T) {
		dir := copyDir(t, src)
		os.Truncate(lastSegment(t, dir), start)
		// Crash right after creating the next segment file.
		os.WriteFile(filepath.Join(dir, segName(n+5)), []byte("EGS"), 0o600)
		check(t, dir, 1)
	})
}

func TestCorruptAckLog(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir})
	appendN(t, s, 1, 5)
	s.Ack(1)
	s.Ack(3)
	s.Close()
	path := filepath.Join(dir, ackFileName)
	b, _ := os.ReadFile(path)
	b[len(b)-1] ^= 1 // the last ack record (3) is now bad
	os.WriteFile(path, b, 0o600)

	s = openT(t, Options{Dir: dir})
	if got := entryIDs(all(t, s)); fmt.Sprint(got) != "[2 3 4 5]" {
		t.Fatalf("entries %v", got)
	}
	if st := s.Stats(); st.AckDamage != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestUnknownVersionRefused: a higher version with no record that reads
// under this one is refused (TestSegmentNewerVersionRefusedUntouched
// checks the bytes); with records that read it is a damaged header
// (TestSegmentHeaderDamageLosesNoMessage).
func TestUnknownVersionRefused(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir})
	appendN(t, s, 1, 1)
	s.Close()
	path := lastSegment(t, dir)
	b, _ := os.ReadFile(path)
	b[4] = segVersion + 1
	b[len(b)-1] ^= 0xff // the only record: not of this format
	os.WriteFile(path, b, 0o600)
	if s, err := Open(Options{Dir: dir}); err == nil {
		s.Close()
		t.Fatal("Open accepted an unknown format version")
	} else {
		t.Logf("err: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("segment of an unknown version was touched: %v", err)
	}
}

// FuzzOpen feeds arbitrary bytes as a segment file: Open never panics and
// either refuses (unknown version) or yields a clean spool: IDs increasing,
// every message intact, appends above every ID seen, and a second Open that
// finds the repair complete (nothing more skipped or cut).
func FuzzOpen(f *testing.F) {
	var seed []byte
	seed = append(seed, segHeader(1)...)
	for i := 1; i <= 3; i++ {
		m := testMsg(i)
		seed = appendRecord(seed, ID(i), &m)
	}
	f.Add(seed, false)
	f.Add(seed[:len(seed)-3], false)
	f.Add(segHeader(1), false)
	f.Add(seed, true)
	f.Add(seed[:len(seed)-3], true)
	if b, err := os.ReadFile("testdata/v1-main/0000000000000001.seg"); err == nil {
		f.Add(b, false)
		f.Add(b, true)
	}
	// batch: the Append after the open waits in memory for its group
	// commit (pending.go), which Close writes.
	f.Fuzz(func(t *testing.T, data []byte, batch bool) {
		sync := SyncNone
		if batch {
			sync = SyncBatch
		}
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, segName(1)), data, 0o600)
		s, err := Open(Options{Dir: dir, Sync: sync})
		if err != nil {
			if !errors.Is(err, ErrUnknownVersion) {
				t.Fatalf("Open: %v", err)
			}
			return
		}
		es := all(t, s)
		var last ID
		for _, e := range es {
			if e.ID <= last || int(e.ID) > len(data)/recOverhead {
				t.Fatalf("ids %v from %d bytes", entryIDs(es), len(data))
			}
			last = e.ID
		}
		id, err := s.Append(context.Background(), testMsg(1))
		if err != nil || id <= last {
			t.Fatalf("Append = %d, %v after ids %v", id, err, entryIDs(es))
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s, err = Open(Options{Dir: dir, Sync: sync})
		if err != nil {
			t.Fatalf("second Open: %v", err)
		}
		defer s.Close()
		st := s.Stats()
		es2 := all(t, s)
		if st.Skipped != 0 || st.CorruptTail != 0 || st.Quarantined != 0 || len(es2) != len(es)+1 {
			t.Fatalf("second open: %d entries (first %d), stats %+v", len(es2), len(es), st)
		}
	})
}

// FuzzAckLog feeds arbitrary bytes as acks.log: parsing never panics, every
// range it returns is valid, and a spool opened on it serves exactly the
// records those ranges leave (or refuses an unknown version).
func FuzzAckLog(f *testing.F) {
	ck := ackHeader()
	ck = appendAckRecord(ck, ackRange{first: 1, last: 2, why: remTallied})
	ck = appendAckRecord(ck, ackRange{first: 1, last: 2, why: remTallied})
	ck = appendAckRecord(ck, ackRange{first: 4, last: 4, why: remDelivered})
	f.Add(ck)
	f.Add(ck[:len(ck)-5])
	f.Add([]byte{})
	if b, err := os.ReadFile("testdata/v1-main/acks.log"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := parseAckLog(data)
		if err != nil {
			if !errors.Is(err, ErrUnknownVersion) {
				t.Fatalf("parse: %v", err)
			}
			return
		}
		for i, r := range a.ranges {
			if r.first == 0 || r.first > r.last || i > 0 && r.first <= a.ranges[i-1].last+1 {
				t.Fatalf("ranges %v", a.ranges)
			}
		}
		if a.good+a.bad != (len(data)-int(a.torn)-ackHeaderSize)/ackRecSize && len(data) >= ackHeaderSize {
			t.Fatalf("good %d + bad %d entries in %d bytes, torn %d", a.good, a.bad, len(data), a.torn)
		}

		dir := t.TempDir()
		var seg []byte
		seg = append(seg, segHeader(1)...)
		for i := 1; i <= 6; i++ {
			m := testMsg(i)
			seg = appendRecord(seg, ID(i), &m)
		}
		os.WriteFile(filepath.Join(dir, segName(1)), seg, 0o600)
		os.WriteFile(filepath.Join(dir, ackFileName), data, 0o600)
		s, err := Open(Options{Dir: dir, Sync: SyncNone})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer s.Close()
		var want []ID
		for id := ID(1); id <= 6; id++ {
			if !a.ranges.contains(id) {
				want = append(want, id)
			}
		}
		if got := entryIDs(all(t, s)); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("entries %v, want %v (ranges %v)", got, want, a.ranges)
		}
	})
}

// The kill -9 test: a child process (this test binary, re-executed) appends
// from several goroutines and prints each ID once Append has returned (or
// AppendAsync's done reported it durable). The
// parent SIGKILLs it at a random point, reopens the spool and checks that
// every ID reported durable is there. Three rounds on the same directory.

const crashChildEnv = "EDGEGW_SPOOL_CRASH_CHILD"

func crashMsg(g, i int) Message {
	return Message{
		Topic:   fmt.Sprintf("crash/%d/%d", g, i),
		Payload: bytes.Repeat([]byte{byte(g*31 + i)}, 40+i%200),
		QoS:     1,
	}
}

func checkCrashMsg(m Message) bool {
	var g, i int
	if _, err := fmt.Sscanf(m.Topic, "crash/%d/%d", &g, &i); err != nil {
		return false
	}
	return equalMsg(m, crashMsg(g, i))
}

// crashChild runs in the child process until it is killed. arg is
// "dir,mode" (Append) or "dir,mode,async" (AppendAsync, an ID is printed
// once its done reported it durable).
func crashChild(arg string) {
	dir, rest, _ := strings.Cut(arg, ",")
	mode, variant, _ := strings.Cut(rest, ",")
	sm, err := ParseSyncMode(mode)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	s, err := Open(Options{Dir: dir, Sync: sm, SyncInterval: 2 * time.Millisecond, SegmentSize: 16 << 10})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	durable := make(chan ID, 4096)
	go func() {
		for id := range durable {
			fmt.Fprintf(os.Stdout, "%d\n", id) // one write(2): atomic on a pipe
			if id%3 == 0 {
				s.Ack(id) // some acks too: segment deletion, acks.log
			}
		}
	}()
	for g := range 8 {
		go func() {
			if variant != "async" {
				for i := 0; ; i++ {
					id, err := s.Append(context.Background(), crashMsg(g, i))
					if err != nil {
						fmt.Fprintln(os.Stderr, err)
						os.Exit(3)
					}
					durable <- id
				}
			}
			// Up to 256 appends in flight per goroutine.
			slots := make(chan struct{}, 256)
			for i := 0; ; i++ {
				slots <- struct{}{}
				s.AppendAsync(crashMsg(g, i), func(id ID, err error) {
					if err != nil {
						fmt.Fprintln(os.Stderr, err)
						os.Exit(3)
					}
					durable <- id
					<-slots
				})
			}
		}()
	}
	select {}
}

// runCrashChild starts a child on dir, kills it after it reported killAfter
// IDs and returns every ID it reported.
func runCrashChild(t *testing.T, dir string, mode SyncMode, async bool, killAfter int) []ID {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	arg := dir + "," + mode.String()
	if async {
		arg += ",async"
	}
	cmd.Env = append(os.Environ(), crashChildEnv+"="+arg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	watchdog := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	defer watchdog.Stop()

	var ids []ID
	killed := false
	r := bufio.NewReader(out)
	for {
		line, err := r.ReadString('\n')
		if err == io.EOF {
			break // a fragment without '\n' would not count; there is none
		}
		if err != nil {
			t.Fatal(err)
		}
		v, err := strconv.ParseUint(strings.TrimSpace(line), 10, 64)
		if err != nil {
			t.Fatalf("child said %q", line)
		}
		ids = append(ids, ID(v))
		if len(ids) == killAfter {
			cmd.Process.Signal(syscall.SIGKILL)
			killed = true
		}
	}
	werr := cmd.Wait()
	if !killed {
		t.Fatalf("child exited by itself after %d ids: %v\n%s", len(ids), werr, stderr.String())
	}
	return ids
}

func TestKill9(t *testing.T) { testKill9(t, false) }

// TestKill9Async: the same with AppendAsync; an ID counts as durable once
// its done reported nil.
func TestKill9Async(t *testing.T) { testKill9(t, true) }

func testKill9(t *testing.T, async bool) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	for _, mode := range []SyncMode{SyncAlways, SyncBatch, SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 0))
			dir := t.TempDir()
			durable := map[ID]bool{}
			var prevMax ID
			var reported, ackedMax uint64 // IDs the children reported, and acked (at most)
			var prev Ledger
			for round := range 3 {
				ids := runCrashChild(t, dir, mode, async, 50+rng.IntN(1500))
				roundMax := prevMax
				for _, id := range ids {
					if id <= prevMax {
						t.Fatalf("round %d: id %d reused (previous rounds reached %d)", round, id, prevMax)
					}
					reported++
					if id%3 != 0 { // the child acks multiples of 3
						durable[id] = true
					} else {
						ackedMax++
					}
					roundMax = max(roundMax, id)
				}

				s, err := Open(Options{Dir: dir})
				if err != nil {
					t.Fatalf("round %d: Open after kill: %v", round, err)
				}
				es := all(t, s)
				st := s.Stats()
				s.Close()
				present := make(map[ID]bool, len(es))
				for _, e := range es {
					if !checkCrashMsg(e.Message) {
						t.Fatalf("round %d: entry %d damaged: %q", round, e.ID, e.Message.Topic)
					}
					present[e.ID] = true
				}
				for id := range durable {
					if !present[id] {
						t.Fatalf("round %d: id %d was reported durable but is missing (%d present)",
							round, id, len(es))
					}
				}
				// The ledger adds up after kill -9 (ledger.go): nothing is
				// lost or unknown, every reported record is accepted, no
				// more are delivered than the children acked, and nothing
				// counted before is forgotten.
				l := st.Ledger
				if l.Sum() != l.Accepted || l.Mismatch != 0 || l.Live != uint64(len(es)) ||
					l.Dropped[DropLost] != 0 || l.Unknown != 0 || l.Accepted < reported ||
					l.Delivered > ackedMax || l.Accepted < prev.Accepted || l.Delivered < prev.Delivered {
					t.Fatalf("round %d: ledger %+v (sum %d), live %d, reported %d, acked at most %d, before %+v",
						round, l, l.Sum(), len(es), reported, ackedMax, prev)
				}
				prev = l
				t.Logf("round %d: child reported %d ids, spool holds %d, corrupt tails %d, segments %d, ledger %+v",
					round, len(ids), len(es), st.CorruptTail, st.Segments, l)
				prevMax = roundMax
			}
		})
	}
}
