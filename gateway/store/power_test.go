package store

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/crashsim"
)

// The crash-state explorer (internal/crashsim) on the state store: a
// workload of retained sets and clears, a persistent session's queue
// (adds acknowledged, removals not waited for), inbound QoS 2 groups (a
// bridge origin's packet id with the message it routed, in one record)
// and their releases, with compaction (a small CompactMin) and clean
// restarts, runs through a recording FS; every disk state a power cut
// could leave is opened by the real Open and checked:
//
//   - SyncAlways and SyncBatch: every change whose Wait returned before
//     the cut is there, unless a later change (made before the cut)
//     replaced or removed it;
//   - every mode: nothing is invented (each retained value, queued
//     message and origin id read back is one the workload wrote, and a
//     retained topic holds its last acknowledged value or one written
//     after it); a group is whole (its packet id is kept exactly when its
//     message is); Open succeeds and a record written after it is kept
//     across a clean restart.
//
// CRASHSIM_STATES sets the states per mode (make crashsim).

// retOp is one retained change: a set (val) or a clear (del).
type retOp struct {
	val   []byte
	del   bool
	issue int // the mark before it was appended
	ack   int // the mark once its Wait returned (0: not waited for)
}

// queued is one message queued for the session, perhaps in a group.
type queued struct {
	payload []byte
	ack     int
	del     int    // the mark before its QDel (0: never)
	pid     uint16 // its group's packet id (0: no group)
	odel    int    // the mark before its OriginDel (0: never)
}

type storeWork struct {
	rec  *crashsim.Recorder
	opts Options
	ret  map[string][]retOp
	q    map[uint64]*queued // by seq
}

// storeWorkload runs rounds rounds of the workload in mode.
func storeWorkload(t *testing.T, mode Sync, rounds int) *storeWork {
	t.Helper()
	// On tmpfs where there is one: the workload fsyncs often.
	dir, cleanup, err := crashsim.Scratch(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	w := &storeWork{rec: crashsim.NewRecorder(dir), ret: map[string][]retOp{}, q: map[uint64]*queued{}}
	w.opts = Options{Dir: dir, Sync: mode, SyncInterval: time.Millisecond, CompactMin: 3000, CompactRatio: 2}
	open := func() *Store {
		o := w.opts
		o.FS = w.rec
		s, _, err := Open(o)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	wait := func(s *Store, pos uint64) int {
		if err := s.Wait(pos); err != nil {
			t.Fatal(err)
		}
		return w.rec.Len()
	}
	s := open()
	wait(s, s.SessionPut("c1", SessionMeta{Expiry: time.Hour}))
	n := 0
	var live []uint64 // queued seqs not yet removed
	for round := range rounds {
		for j := range 3 {
			n++
			topic := fmt.Sprintf("r/%d", n%5)
			op := retOp{val: []byte(fmt.Sprintf("v%d-%s", n, strings.Repeat("x", n%7*40))), issue: w.rec.Len()}
			if n%11 == 0 {
				op = retOp{del: true, issue: w.rec.Len()}
				pos := s.RetainDel(topic)
				if j == 0 {
					op.ack = wait(s, pos)
				}
			} else {
				pos := s.RetainSet(Msg{Topic: topic, Payload: op.val, QoS: 1, Retain: true})
				if j != 1 {
					op.ack = wait(s, pos)
				}
			}
			w.ret[topic] = append(w.ret[topic], op)
		}
		// A message queued for the session, acknowledged.
		n++
		qm := &queued{payload: []byte(fmt.Sprintf("q%d-%s", n, strings.Repeat("y", n%5*60)))}
		seq, pos := s.QAdd("c1", Entry{Msg: Msg{Topic: "q", Payload: qm.payload, QoS: 1}, QoS: 1})
		qm.ack = wait(s, pos)
		w.q[seq] = qm
		live = append(live, seq)
		// An inbound QoS 2 message from the cloud, routed with its id.
		n++
		gm := &queued{payload: []byte(fmt.Sprintf("g%d", n)), pid: uint16(round%60000 + 1)}
		g := s.Begin("cloud", gm.pid)
		gseq, _ := s.QAdd("c1", Entry{Msg: Msg{Topic: "cmd", Payload: gm.payload, QoS: 2}, QoS: 2})
		gm.ack = wait(s, g.Commit(true))
		w.q[gseq] = gm
		live = append(live, gseq)
		// The subscriber took the oldest; the cloud released an old id.
		if len(live) > 4 {
			del := live[0]
			live = live[1:]
			w.q[del].del = w.rec.Len()
			s.QDel("c1", del)
		}
		if round >= 3 {
			old := w.q[live[0]]
			if old.pid != 0 && old.odel == 0 {
				old.odel = w.rec.Len()
				s.OriginDel("cloud", old.pid)
			}
		}
		if round%15 == 14 {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = open()
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return w
}

// check opens the state in dir and returns what breaks a promise; lost
// counts the acknowledged changes missing (SyncNone may lose them).
func (w *storeWork) check(dir string, cut crashsim.State, lost *int, path *string) error {
	o := w.opts
	o.Dir = dir
	s, st, err := Open(o)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	rs := s.Stats()
	*path = fmt.Sprintf("skipped=%t quarantined=%t rewritten=%t retained=%t sessions=%t",
		rs.SkippedRecords > 0, rs.Quarantined > 0, rs.Compactions > 0, len(st.Retained) > 0, len(st.Sessions) > 0)
	strict := w.opts.Sync != SyncNone
	k := cut.Crash
	fail := func(format string, a ...any) error {
		s.Close()
		return fmt.Errorf(format, a...)
	}
	got := map[string][]byte{}
	for _, m := range st.Retained {
		got[m.Topic] = m.Payload
	}
	for topic, ops := range w.ret {
		last := -1 // the last acknowledged change before the cut
		for i, op := range ops {
			if op.ack != 0 && op.ack <= k {
				last = i
			}
		}
		v, has := got[topic]
		ok := false
		allowed := func(op *retOp) bool {
			if op == nil || op.del {
				return !has
			}
			return has && bytes.Equal(v, op.val)
		}
		from := last
		if !strict {
			from = -1
		}
		if from < 0 {
			ok = allowed(nil)
		} else {
			ok = allowed(&ops[from])
		}
		for i := max(from+1, 0); i < len(ops) && !ok; i++ {
			ok = ops[i].issue <= k && allowed(&ops[i])
		}
		if !ok {
			if last >= 0 && !strict {
				*lost++
				ok = true
			}
			if !ok {
				return fail("retained %s holds %q (present %v): not its last acknowledged value nor a later one", topic, v, has)
			}
		}
	}
	if len(got) > len(w.ret) {
		return fail("retained topics invented: %d, wrote %d", len(got), len(w.ret))
	}
	queue := map[uint64][]byte{}
	for _, ss := range st.Sessions {
		if ss.ID != "c1" {
			return fail("session %q invented", ss.ID)
		}
		for _, e := range ss.Queue {
			queue[e.Seq] = e.Msg.Payload
		}
	}
	pids := map[uint16]bool{}
	for origin, ids := range st.Origins {
		if origin != "cloud" {
			return fail("origin %q invented", origin)
		}
		for _, id := range ids {
			pids[id] = true
		}
	}
	groupPid := map[uint16]bool{}
	for seq, qm := range w.q {
		p, has := queue[seq]
		if has && !bytes.Equal(p, qm.payload) {
			return fail("queued seq %d changed: %q", seq, p)
		}
		removed := qm.del != 0 && qm.del <= k
		if qm.ack != 0 && qm.ack <= k && !removed && !has {
			if strict {
				return fail("queued seq %d (%q) acknowledged, lost", seq, qm.payload)
			}
			*lost++
		}
		if qm.pid == 0 {
			continue
		}
		groupPid[qm.pid] = true
		released := qm.odel != 0 && qm.odel <= k
		if qm.ack != 0 && qm.ack <= k && !released && !pids[qm.pid] {
			if strict {
				return fail("inbound id %d acknowledged, lost", qm.pid)
			}
			*lost++
		}
		if !removed && !released && pids[qm.pid] != has {
			return fail("group torn: inbound id %d kept %v, its message (seq %d) kept %v", qm.pid, pids[qm.pid], seq, has)
		}
	}
	for id := range pids {
		if !groupPid[id] {
			return fail("inbound id %d invented", id)
		}
	}
	for seq := range queue {
		if w.q[seq] == nil {
			return fail("queued seq %d invented", seq)
		}
	}
	if err := s.Wait(s.RetainSet(Msg{Topic: "after", Payload: []byte("kept"), Retain: true})); err != nil {
		return fail("write after recovery: %v", err)
	}
	if err := s.Close(); err != nil {
		return fmt.Errorf("close after recovery: %w", err)
	}
	s, st, err = Open(o)
	if err != nil {
		return fmt.Errorf("reopen after recovery: %w", err)
	}
	defer s.Close()
	if !slices.ContainsFunc(st.Retained, func(m Msg) bool { return m.Topic == "after" && string(m.Payload) == "kept" }) {
		return fmt.Errorf("the record written after recovery is not kept")
	}
	return nil
}

// TestPowerCutStates explores the crash states of the store's workload
// in each sync mode and reports the count in a line make crashsim sums.
func TestPowerCutStates(t *testing.T) {
	for _, mode := range []Sync{SyncAlways, SyncBatch, SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			// Enough crash points for the states asked for.
			w := storeWorkload(t, mode, max(40, crashsim.Budget(t, 60)/6))
			tr := w.rec.Trace()
			worst, lossy := 0, 0
			paths := map[string]bool{}
			res, err := crashsim.Explore(tr, crashsim.Options{Max: crashsim.Budget(t, 60), Seed: uint64(mode) + 11}, "", 10,
				func(dir string, st crashsim.State) error {
					lost, path := 0, ""
					err := w.check(dir, st, &lost, &path)
					paths[path] = true
					worst = max(worst, lost)
					if lost > 0 {
						lossy++
					}
					return err
				})
			if err != nil {
				t.Fatal(err)
			}
			fmt.Printf("crashsim-result: log=state-store mode=%s ops=%d states=%d distinct=%d paths=%d violations=%d lost_max=%d states_with_loss=%d\n",
				mode, len(tr.Ops), res.States, res.Distinct, len(paths), len(res.Violations), worst, lossy)
			for _, v := range res.Violations {
				t.Errorf("violation: %v\n%s", v, tr.Describe(v.State.Crash-8, v.State.Crash))
			}
		})
	}
}
