package session_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/edgegw/edgegw/bridge/session"
	"github.com/edgegw/edgegw/bridge/spool"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// spoolStore is the spool's session log as a session.Store.
type spoolStore struct{ *spool.Session }

func (s spoolStore) Flows() ([]session.StoredFlow, error) {
	fs, err := s.Session.Flows()
	out := make([]session.StoredFlow, len(fs))
	for i, f := range fs {
		out[i] = session.StoredFlow(f)
	}
	return out, err
}

// Environment of the drain child (TestDrainChild).
const (
	envDir  = "ENGINE_DRAIN_DIR"
	envAddr = "ENGINE_DRAIN_ADDR"
	envVer  = "ENGINE_DRAIN_VERSION"
	envSync = "ENGINE_DRAIN_SYNC"
)

// TestDrainChild is not a test of its own: run by TestKillWhileDraining
// as a child process (envDir set), it drains the spool in envDir into
// the broker at envAddr with the engine on the spool's session log, and
// exits 0 once the spool is empty.
func TestDrainChild(t *testing.T) {
	dir := os.Getenv(envDir)
	if dir == "" {
		return // only as TestKillWhileDraining's child
	}
	sync, _ := spool.ParseSyncMode(os.Getenv(envSync))
	sp, err := spool.Open(spool.Options{Dir: dir, Sync: sync})
	if err != nil {
		t.Fatal(err)
	}
	ss, err := spool.OpenSession(sp)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := strconv.Atoi(os.Getenv(envVer))
	cfg := config(packet.Version(v))
	cfg.ClientID = "drain"
	cfg.Load = func(rec uint64) (*packet.Publish, error) {
		m, ok, err := sp.Get(spool.ID(rec))
		if err != nil || !ok {
			return nil, fmt.Errorf("record %d: %v (in the spool: %v)", rec, err, ok)
		}
		return &packet.Publish{Topic: m.Topic, QoS: m.QoS, Payload: m.Payload}, nil
	}
	e, err := session.New(cfg, spoolStore{ss})
	if err != nil {
		t.Fatal(err)
	}
	l, err := e.Connect(context.Background(), dial(t, os.Getenv(envAddr)))
	if err != nil {
		t.Fatal(err)
	}
	// The flows re-sent on connect are in flight already: like the
	// bridge's picker, the drain skips their records (one may complete,
	// and its record leave the spool, before the drain reaches it).
	resumed := map[spool.ID]bool{}
	for _, f := range l.Resumed() {
		resumed[spool.ID(f.Rec)] = true
	}
	var after spool.ID
	for {
		es, err := sp.Peek(after, 256)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 0 {
			break
		}
		for _, en := range es {
			after = en.ID
			if resumed[en.ID] {
				continue
			}
			if _, err := l.Publish(context.Background(), uint64(en.ID), &packet.Publish{Topic: en.Message.Topic, QoS: en.Message.QoS, Payload: en.Message.Payload}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for sp.Stats().Messages > 0 {
		select {
		case <-l.Done():
			t.Fatal(l.Err())
		case <-time.After(10 * time.Millisecond): // polling the spool's count
		}
	}
	l.Close(true)
	ss.Close()
	sp.Close()
}

// crashDrainRuns is the environment variable that turns
// TestKillWhileDraining into the full run (make crash-drain): this many
// runs of 3,000 records with two kills each, per protocol. Unset, it is
// one run of 300 records with one kill, short enough for make test.
const crashDrainRuns = "EDGEGW_CRASH_DRAIN_RUNS"

// With the full run: crashDrainRecords sets the backlog (3,000 unset) and
// crashDrainRTT a round-trip time between the draining process and the
// broker (a delaying proxy, half each way; none unset).
const (
	crashDrainRecords = "EDGEGW_CRASH_DRAIN_RECORDS"
	crashDrainRTT     = "EDGEGW_CRASH_DRAIN_RTT"
)

// TestKillWhileDraining: a backlog of QoS 2 records drains into mosquitto
// (a persistent session, clean session 0) while the process running the
// engine is killed with SIGKILL; the restarted process resumes the flows
// from the spool's session log. Every message arrives exactly once.
func TestKillWhileDraining(t *testing.T) {
	if os.Getenv(envDir) != "" {
		return
	}
	n, runs, kills := 300, 1, []int{3}
	var rtt time.Duration
	if v := os.Getenv(crashDrainRuns); v != "" {
		r, err := strconv.Atoi(v)
		if err != nil || r < 1 {
			t.Fatalf("%s=%q: want a number of runs", crashDrainRuns, v)
		}
		n, runs, kills = 3000, r, []int{4, 2}
		if v := os.Getenv(crashDrainRecords); v != "" {
			if n, err = strconv.Atoi(v); err != nil || n < 10 {
				t.Fatalf("%s=%q: want a number of records, at least 10", crashDrainRecords, v)
			}
		}
		if v := os.Getenv(crashDrainRTT); v != "" {
			if rtt, err = time.ParseDuration(v); err != nil || rtt < 0 {
				t.Fatalf("%s=%q: want a duration", crashDrainRTT, v)
			}
		}
	}
	versions(t, func(t *testing.T, v packet.Version) {
		for run := 1; run <= runs; run++ {
			t.Run("run"+strconv.Itoa(run), func(t *testing.T) { // its broker ends with it
				dups, lost := killWhileDraining(t, v, n, kills, rtt)
				t.Logf("CRASH-DRAIN v%s run %d: %d records, %d kills, RTT %v: %d duplicates, %d lost", v, run, n, len(kills), rtt, dups, lost)
				if dups > 0 || lost > 0 {
					t.Errorf("%d duplicates, %d lost; want exactly once", dups, lost)
				}
			})
		}
	})
}

// killWhileDraining drains n QoS 2 records into a new mosquitto, killing
// the draining process once n/k of them arrived, for each k of kills,
// and returns the duplicates and the lost messages. With rtt > 0 the
// draining process reaches the broker through a proxy that delays each
// way by rtt/2.
func killWhileDraining(t *testing.T, v packet.Version, n int, kills []int, rtt time.Duration) (dups, lost int) {
	up := startBroker(t, "max_queued_messages 100000\n")
	s := subscribe(t, up.addr, "drain/#")
	drainAddr := up.addr
	if rtt > 0 {
		p := testutil.StartProxy(t, up.addr)
		p.SetDelay(testutil.Up, rtt/2)
		p.SetDelay(testutil.Down, rtt/2)
		drainAddr = p.Addr()
	}
	dir := t.TempDir()
	sp, err := spool.Open(spool.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		if _, err := sp.Append(context.Background(), spool.Message{Topic: "drain/t", QoS: 2, Payload: []byte("m" + strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	sp.Close()
	{ // the subscriber is in place before the drain
		e, _ := session.New(config(v), session.NewMemStore())
		l := connect(t, e, up.addr)
		s.ready(t, l, "drain/probe")
		l.Close(true)
	}
	child := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestDrainChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), envDir+"="+dir, envAddr+"="+drainAddr, envVer+"="+strconv.Itoa(int(v)), envSync+"=batch")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	received := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.seen)
	}
	for _, k := range kills {
		cmd := child()
		testutil.Eventually(t, 60*time.Second, "drain under way", func() bool { return received() >= n/k })
		cmd.Process.Signal(syscall.SIGKILL)
		if err := cmd.Wait(); err == nil {
			// The drain ended before the kill: nothing was tested.
			t.Fatalf("the drain of %d records was over before the kill at %d received", n, n/k)
		}
	}
	cmd := child()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("last drain: %v", err)
	}
	testutil.Eventually(t, 30*time.Second, "every message received", func() bool { return received() >= n+1 })
	for i := 1; i <= n; i++ {
		switch c := s.count("m" + strconv.Itoa(i)); {
		case c == 0:
			lost++
			t.Logf("message %d lost", i)
		case c > 1:
			dups += c - 1
			t.Logf("duplicate m%d", i)
		}
	}
	return dups, lost
}
