package store

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

const bridgeOrigin = "$bridge/cloud"

// An origin's inbound id and the routing of its message come back
// together after a restart; a released id does not come back; a group
// committed without its id keeps only the routing.
func TestGroupRoundTrip(t *testing.T) {
	for _, mode := range []Sync{SyncAlways, SyncBatch, SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			s, _ := open(t, dir, mode)
			s.SessionPut("dev", SessionMeta{Expiry: time.Hour})
			g := s.Begin(bridgeOrigin, 7)
			seq, qpos := s.QAdd("dev", Entry{Msg: Msg{Topic: "cmd/x", Payload: []byte("seven"), QoS: 2, Origin: bridgeOrigin}, QoS: 2})
			rpos := s.RetainSet(Msg{Topic: "cmd/r", Payload: []byte("kept"), QoS: 2, Retain: true})
			pos := g.Commit(true)
			if qpos != pos || rpos != pos {
				t.Fatalf("records in a group at %d and %d, the group at %d", qpos, rpos, pos)
			}
			g = s.Begin(bridgeOrigin, 8)
			s.QAdd("dev", Entry{Msg: Msg{Topic: "cmd/x", Payload: []byte("eight")}, QoS: 2})
			g.Commit(false) // not routed whole: the id is not kept
			g = s.Begin(bridgeOrigin, 9)
			g.Commit(true)
			g = s.Begin("$bridge/other", 9)
			g.Commit(true)
			if err := s.Wait(s.OriginDel(bridgeOrigin, 9)); err != nil {
				t.Fatal(err)
			}
			want := s.md.state()
			if mode == SyncNone { // kill -9: only what was written
				s, dir = reopenAfterKill(t, dir, mode)
			} else {
				s.Close()
				s, _ = open(t, dir, mode)
			}
			got := s.md.state()
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("reopened\n%+v\nwant\n%+v", got, want)
			}
			if !reflect.DeepEqual(got.Origins, map[string][]uint16{bridgeOrigin: {7}, "$bridge/other": {9}}) {
				t.Fatalf("origins %v", got.Origins)
			}
			if q := got.Sessions[0].Queue; len(q) != 2 || q[0].Seq != seq || string(q[0].Msg.Payload) != "seven" {
				t.Fatalf("queue %+v", q)
			}
			if len(got.Retained) != 1 || string(got.Retained[0].Payload) != "kept" {
				t.Fatalf("retained %+v", got.Retained)
			}
			// All of an origin's ids go at once (its upstream lost the session).
			s.Wait(s.OriginDel(bridgeOrigin, 0))
			s.Close()
			_, st := open(t, dir, mode)
			if !reflect.DeepEqual(st.Origins, map[string][]uint16{"$bridge/other": {9}}) {
				t.Fatalf("after releasing all of %s: %v", bridgeOrigin, st.Origins)
			}
		})
	}
}

// reopenAfterKill opens dir again without closing the store that has it
// (its lock is released by hand, as the kernel does for a killed process).
func reopenAfterKill(t *testing.T, dir string, mode Sync) (*Store, string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, logName))
	if err != nil {
		t.Fatal(err)
	}
	copyDir := t.TempDir()
	os.WriteFile(filepath.Join(copyDir, logName), b, 0o600)
	s, _ := open(t, copyDir, mode)
	return s, copyDir
}

// While a group is open, records appended by anyone join it and nothing
// of it reaches the file; records from before it are written and
// reported kept meanwhile. On Commit it is one record, holding them in
// the order they were appended.
func TestGroupIsOneRecord(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, SyncBatch)
	before := s.RetainSet(Msg{Topic: "before", Payload: []byte("b"), Retain: true})
	g := s.Begin(bridgeOrigin, 3)
	s.SessionPut("dev", SessionMeta{Expiry: time.Hour}) // another goroutine's, say
	s.QAdd("dev", Entry{Msg: Msg{Topic: "cmd/in-group", Payload: []byte("p")}, QoS: 2})
	if err := s.Wait(before); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	behind := len(s.pending)
	s.mu.Unlock()
	b, _ := os.ReadFile(filepath.Join(dir, logName))
	if !bytes.Contains(b, []byte("before")) || bytes.Contains(b, []byte("cmd/in-group")) || behind != 0 {
		t.Fatalf("open group: file has the record before it: %v, has the group's: %v, pending %d B",
			bytes.Contains(b, []byte("before")), bytes.Contains(b, []byte("cmd/in-group")), behind)
	}
	if err := s.Wait(g.Commit(true)); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(filepath.Join(dir, logName))
	var recs []rec
	scan(b[headerSize:], func(r rec) { recs = append(recs, r) })
	last := recs[len(recs)-1]
	if last.op != opGroup || last.origin != bridgeOrigin || last.pid != 3 || len(last.group) != 2 ||
		last.group[0].op != opSessionPut || last.group[1].op != opQAdd {
		t.Fatalf("last record %+v", last)
	}
}

// A group cut at any byte (a kill -9 part way through its write, a torn
// page after a power cut) comes back whole or not at all: never the id
// without the message it routed, never the message without its id.
func TestGroupTornIsAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, SyncBatch)
	s.SessionPut("dev", SessionMeta{Expiry: time.Hour})
	if err := s.Wait(s.SubPut("dev", Sub{Filter: "cmd/#", QoS: 2})); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	start := s.fileSize
	s.mu.Unlock()
	g := s.Begin(bridgeOrigin, 11)
	s.QAdd("dev", Entry{Msg: Msg{Topic: "cmd/x", Payload: bytes.Repeat([]byte("x"), 3000)}, QoS: 2})
	s.RetainSet(Msg{Topic: "cmd/r", Payload: []byte("r"), Retain: true})
	if err := s.Wait(g.Commit(true)); err != nil {
		t.Fatal(err)
	}
	full, _ := os.ReadFile(filepath.Join(dir, logName)) // as written: Close would compact it
	for cut := int(start); cut <= len(full); cut++ {
		if cut > int(start)+40 && cut < len(full)-40 && cut%97 != 0 {
			continue // the framing at both ends, and a sample of the body
		}
		d := t.TempDir()
		os.WriteFile(filepath.Join(d, logName), full[:cut], 0o600)
		s, st, err := Open(Options{Dir: d})
		if err != nil {
			t.Fatal(err)
		}
		ids := len(st.Origins[bridgeOrigin])
		queued := 0
		if len(st.Sessions) == 1 {
			queued = len(st.Sessions[0].Queue)
		}
		s.Close()
		whole := ids == 1 && queued == 1 && len(st.Retained) == 1
		none := ids == 0 && queued == 0 && len(st.Retained) == 0
		if !whole && !none || whole != (cut == len(full)) {
			t.Fatalf("cut at %d of %d: %d ids, %d queued, %d retained", cut, len(full), ids, queued, len(st.Retained))
		}
	}
}

// A snapshot (compaction) keeps the ids; while a group is open nothing is
// compacted, so no snapshot holds half a group.
func TestGroupSurvivesCompaction(t *testing.T) {
	dir := t.TempDir()
	s, _, err := Open(Options{Dir: dir, Sync: SyncNone, CompactMin: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.SessionPut("dev", SessionMeta{Expiry: time.Hour})
	for i := range 200 {
		g := s.Begin(bridgeOrigin, uint16(i+1))
		seq, _ := s.QAdd("dev", Entry{Msg: Msg{Topic: "cmd/x", Payload: bytes.Repeat([]byte("p"), 100)}, QoS: 2})
		s.Wait(g.Commit(true))
		s.QDel("dev", seq)
		if i%2 == 0 {
			s.Wait(s.OriginDel(bridgeOrigin, uint16(i+1)))
		}
	}
	if s.Stats().Compactions == 0 {
		t.Fatal("no compaction")
	}
	want := s.md.state()
	s.Close()
	_, st := open(t, dir, SyncNone)
	if !reflect.DeepEqual(st, want) || len(st.Origins[bridgeOrigin]) != 100 {
		t.Fatalf("after compactions: %d ids (want 100), equal %v", len(st.Origins[bridgeOrigin]), reflect.DeepEqual(st, want))
	}
}
