package procs

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/edgegw/edgegw/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder stands in for the runtime in the policy tests: One records 1,
// All records and returns max.
type recorder struct {
	max   int
	calls []int
}

func (r *recorder) setter() Setter {
	return Setter{
		One: func() { r.calls = append(r.calls, 1) },
		All: func() int { r.calls = append(r.calls, r.max); return r.max },
	}
}

// testPolicy is the shipped policy (DefaultPolicy) on a 4-processor
// machine, so the policy tests check what docs/config.md promises.
func testPolicy() Policy {
	p := DefaultPolicy()
	p.Max = 4
	return p
}

// TestDefaultPolicyIsDocumented: docs/config.md says the gateway samples
// its CPU time every 100 ms, takes all processors (GOMAXPROCS as the
// runtime chose it) once a sample uses half a core, and goes back to one
// after 2 s below a quarter of one.
func TestDefaultPolicyIsDocumented(t *testing.T) {
	want := Policy{Max: runtime.GOMAXPROCS(0), RaiseAt: 0.5, LowerAt: 0.25, Quiet: 2 * time.Second, Every: 100 * time.Millisecond}
	if got := DefaultPolicy(); got != want {
		t.Fatalf("DefaultPolicy %+v; docs/config.md says %+v", got, want)
	}
}

// TestGovernorPolicy drives the decision with samples: one processor from
// the start, all of them as soon as one sample uses half a core, back to
// one only after Quiet below a quarter of one without a busier sample in
// between.
func TestGovernorPolicy(t *testing.T) {
	const tick = 100 * time.Millisecond
	load := func(cores float64) time.Duration { return time.Duration(cores * float64(tick)) }
	r := &recorder{max: 4}
	g := New(testPolicy(), r.setter())
	if g.Procs() != 1 || len(r.calls) != 1 || r.calls[0] != 1 {
		t.Fatalf("start: procs %d, calls %v; want 1, [1]", g.Procs(), r.calls)
	}
	steps := []struct {
		cores float64
		want  int
	}{
		{0.05, 1}, {0.49, 1}, // sensor rates: stays on one
		{0.5, 4},           // half a core: all of them at once
		{1.8, 4}, {0.3, 4}, // between the thresholds: stays
	}
	for i, s := range steps {
		g.Step(load(s.cores), tick)
		if g.Procs() != s.want {
			t.Fatalf("step %d (%.2f cores): procs %d, want %d", i, s.cores, g.Procs(), s.want)
		}
	}
	// 19 quiet samples (1.9 s), then a busy one: the quiet time starts over.
	for range 19 {
		g.Step(load(0.1), tick)
	}
	g.Step(load(0.3), tick)
	for range 19 {
		g.Step(load(0.1), tick)
	}
	if g.Procs() != 4 {
		t.Fatalf("lowered after 1.9 s of quiet: procs %d", g.Procs())
	}
	g.Step(load(0.1), tick) // 2 s of quiet
	if g.Procs() != 1 {
		t.Fatalf("2 s below a quarter core: procs %d, want 1", g.Procs())
	}
	want := []int{1, 4, 1}
	if len(r.calls) != len(want) {
		t.Fatalf("GOMAXPROCS set %v; want %v (no change without a decision)", r.calls, want)
	}
	for i := range want {
		if r.calls[i] != want[i] {
			t.Fatalf("GOMAXPROCS set %v; want %v", r.calls, want)
		}
	}
}

// TestGovernorOneProcessorMachine: with one processor there is nothing to
// decide and GOMAXPROCS is never touched.
func TestGovernorOneProcessorMachine(t *testing.T) {
	r := &recorder{max: 1}
	p := testPolicy()
	p.Max = 1
	g := New(p, r.setter())
	g.Step(time.Second, 100*time.Millisecond)
	g.Run(context.Background()) // returns at once
	if len(r.calls) != 0 || g.Procs() != 1 {
		t.Fatalf("calls %v, procs %d; want none, 1", r.calls, g.Procs())
	}
}

// TestGovernorFollowsRealLoad runs the Governor on this process's real CPU
// time and real GOMAXPROCS: busy goroutines raise it, their end lowers it,
// and stopping gives the runtime its processors back.
func TestGovernorFollowsRealLoad(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	if before < 2 {
		t.Fatalf("GOMAXPROCS %d: this test needs a machine with 2 processors", before)
	}
	defer runtime.GOMAXPROCS(before)
	p := DefaultPolicy()
	// The thresholds are TestGovernorPolicy's; this one tests the
	// measuring and the setting, on a machine other tests share.
	p.RaiseAt, p.LowerAt, p.Quiet = 0.2, 0.1, 300*time.Millisecond
	g := New(p, Runtime())
	// Checked before Run samples: on a loaded machine its first sample may
	// already raise it.
	if runtime.GOMAXPROCS(0) != 1 {
		t.Fatalf("GOMAXPROCS %d at the start; want 1", runtime.GOMAXPROCS(0))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()

	busy, stopBusy := context.WithCancel(context.Background())
	spun := make(chan struct{})
	go func() {
		defer close(spun)
		for busy.Err() == nil {
			for i := 0; i < 1e5; i++ {
				_ = i * i
			}
		}
	}()
	testutil.Eventually(t, 20*time.Second, "a goroutine using a whole core to raise GOMAXPROCS",
		func() bool { return runtime.GOMAXPROCS(0) == before })
	stopBusy()
	<-spun
	testutil.Eventually(t, 20*time.Second, "an idle process to go back to one processor",
		func() bool { return runtime.GOMAXPROCS(0) == 1 })
	cancel()
	<-done
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Fatalf("GOMAXPROCS %d after Run ended; want %d back", got, before)
	}
}

// TestGovernorLeavesTheRuntimeFollowingTheCPUs: once raised, the count is
// the runtime's own again, so it follows the CPUs the process may use (a
// board taking a core offline, an affinity or cgroup change) as it would
// without the Governor. Setting a number instead (what the first version
// did) pins it: a process pinned to one CPU kept 2. In a child process:
// the test pins every thread of its process.
func TestGovernorLeavesTheRuntimeFollowingTheCPUs(t *testing.T) {
	if os.Getenv("PROCS_PIN_CHILD") == "1" {
		pinnedChild(t)
		return
	}
	if runtime.NumCPU() < 2 {
		t.Fatalf("%d CPU: this test needs a machine with 2", runtime.NumCPU())
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestGovernorLeavesTheRuntimeFollowingTheCPUs$", "-test.v")
	cmd.Env = append(os.Environ(), "PROCS_PIN_CHILD=1", "GOMAXPROCS=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func pinnedChild(t *testing.T) {
	g := New(DefaultPolicy(), Runtime())
	g.Step(time.Second, time.Second) // a busy second: all processors
	if n := runtime.GOMAXPROCS(0); n < 2 {
		t.Fatalf("GOMAXPROCS %d after a busy sample; want the runtime's %d", n, runtime.NumCPU())
	}
	// The first CPU the process may use: CPU 0 need not be one of them (a
	// container's cpuset), and pinning to a CPU outside it fails.
	var allowed, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		t.Fatal(err)
	}
	for cpu := 0; ; cpu++ {
		if allowed.IsSet(cpu) {
			one.Set(cpu)
			break
		}
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		if err := unix.SchedSetaffinity(tid, &one); err != nil {
			t.Fatalf("pin thread %d: %v", tid, err)
		}
	}
	// The runtime looks at the CPUs it may use once a second.
	testutil.Eventually(t, 10*time.Second, "GOMAXPROCS to follow the process onto one CPU",
		func() bool { return runtime.GOMAXPROCS(0) == 1 })
}
