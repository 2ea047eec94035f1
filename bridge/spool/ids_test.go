package spool

import (
	"context"
	"testing"

	"github.com/edgegw/edgegw/internal/crashsim"
)

// After a power cut no ID a reader had is handed out again, in every sync
// mode: record IDs are the upstream's packet ids. A crash state the
// explorer found (TestPowerCutStates, spool-segments/none): with SyncNone
// the ids file was never fsynced, so a cut that kept only what was
// fsynced lost it with the records, and IDs started again at 1 after the
// upstream had seen 1..5. In batch mode the same could follow a cut in
// the first commit after Open (its reader is woken before that commit's
// fsync of the ids file). Open now fsyncs the ceiling it writes, and
// every flush fsyncs a raised one.
func TestPowerCutNeverRepeatsAnID(t *testing.T) {
	for _, mode := range []SyncMode{SyncNone, SyncBatch, SyncAlways} {
		t.Run(mode.String(), func(t *testing.T) {
			work := t.TempDir()
			rec := crashsim.NewRecorder(work)
			s, err := Open(Options{Dir: work, Sync: mode, FS: rec})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				s.AppendAsync(testMsg(i+1), func(ID, error) {})
			}
			es, err := s.Peek(0, 10) // the reader has them: they may be upstream
			if err != nil || len(es) != 5 {
				t.Fatalf("peek: %v, %v", es, err)
			}
			st := rec.Trace().Synced(rec.Len())
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := st.WriteDir(dir); err != nil {
				t.Fatal(err)
			}
			s2 := openT(t, Options{Dir: dir, Sync: mode})
			id, err := s2.Append(context.Background(), testMsg(9))
			if err != nil {
				t.Fatal(err)
			}
			if id <= 5 {
				t.Fatalf("after the cut the next id is %d: ids 1..5 were handed out before it", id)
			}
		})
	}
}
