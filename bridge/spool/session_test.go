package spool_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/edgegw/edgegw/bridge/session"
	"github.com/edgegw/edgegw/bridge/spool"
)

// The spool's session log is the session engine's Store.
var _ session.Store = sessionStore{}

// sessionStore adapts spool.Session's flows to session.StoredFlow.
type sessionStore struct{ *spool.Session }

func (s sessionStore) Flows() ([]session.StoredFlow, error) {
	fs, err := s.Session.Flows()
	out := make([]session.StoredFlow, len(fs))
	for i, f := range fs {
		out[i] = session.StoredFlow(f)
	}
	return out, err
}

func openSpool(t *testing.T, dir string) *spool.Spool {
	t.Helper()
	sp, err := spool.Open(spool.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// TestSessionSurvivesReopen: flows and their PUBREC are there after a close and reopen; a flow whose record was acked is not.
func TestSessionSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	sp := openSpool(t, dir)
	var ids []spool.ID
	for range 3 {
		id, err := sp.Append(context.Background(), spool.Message{Topic: "t", Payload: []byte("p"), QoS: 2})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	ss, err := spool.OpenSession(sp)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		if err := ss.Sent(uint64(id), uint16(100+i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := ss.Released([]uint64{uint64(ids[1])}); err != nil {
		t.Fatal(err)
	}
	if err := ss.Ack(uint64(ids[2])); err != nil {
		t.Fatal(err)
	}
	ss.Close()
	sp.Close()

	sp = openSpool(t, dir)
	defer sp.Close()
	ss, err = spool.OpenSession(sp)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	fs, _ := ss.Flows()
	want := []spool.SessionFlow{{Rec: uint64(ids[0]), ID: 100}, {Rec: uint64(ids[1]), ID: 101, Released: true}}
	if len(fs) != len(want) || fs[0] != want[0] || fs[1] != want[1] {
		t.Fatalf("flows %+v, want %+v", fs, want)
	}
}

// TestSessionTornTail: a log cut in the middle of its last entry (a
// crash during an append) keeps every entry before it.
func TestSessionTornTail(t *testing.T) {
	dir := t.TempDir()
	sp := openSpool(t, dir)
	id, _ := sp.Append(context.Background(), spool.Message{Topic: "t", QoS: 2})
	ss, _ := spool.OpenSession(sp)
	ss.Sent(uint64(id), 5)
	ss.Released([]uint64{uint64(id)})
	ss.Close()
	sp.Close()
	p := filepath.Join(dir, "session.log")
	b, _ := os.ReadFile(p)
	os.WriteFile(p, b[:len(b)-3], 0o600) // the Released entry torn
	sp = openSpool(t, dir)
	defer sp.Close()
	ss, err := spool.OpenSession(sp)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	fs, _ := ss.Flows()
	if len(fs) != 1 || fs[0].Released || fs[0].ID != 5 {
		t.Fatalf("flows %+v, want one, at its PUBLISH", fs)
	}
}
