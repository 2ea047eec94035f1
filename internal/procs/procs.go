// Package procs sizes the Go scheduler to the gateway's load: one
// processor while it is nearly idle, all of them under load.
//
// At the rates sensors send (a few hundred readings a second spread over
// a thousand connections) every reading wakes the process from idle, and
// with more than one processor the runtime wakes a second thread to look
// for work each time a goroutine is readied (the reader readying the
// spool's flusher, the flusher readying the bridge's sender, ...): issue
// 16 measured ~3,000 thread wakeups/s for 500 readings/s. On one
// processor the same hand-offs are goroutine switches on one thread. At
// full load the other cores are what the fan-in lead is made of, so the
// Governor raises GOMAXPROCS back as soon as the process uses half a core.
package procs

import (
	"context"
	"runtime"
	"syscall"
	"time"
)

// Policy is when the Governor changes GOMAXPROCS.
type Policy struct {
	Max     int           // GOMAXPROCS as the runtime chose it at start; ≤ 1: nothing to govern
	RaiseAt float64       // on one processor, give the runtime its choice back once a sample uses this many cores
	LowerAt float64       // above one, go back to one once every sample for Quiet uses less
	Quiet   time.Duration // how long the load must stay below LowerAt
	Every   time.Duration // sampling interval
}

// DefaultPolicy raises within one 100 ms sample of half a core and lowers
// after 2 s below a quarter of one: a burst pays at most 100 ms on one
// processor, and a load hovering near the threshold does not flap (each
// change stops the world for a few microseconds).
func DefaultPolicy() Policy {
	return Policy{Max: runtime.GOMAXPROCS(0), RaiseAt: 0.5, LowerAt: 0.25, Quiet: 2 * time.Second, Every: 100 * time.Millisecond}
}

// Setter changes GOMAXPROCS; Runtime is the real one, tests pass their own.
type Setter struct {
	One func()     // run on one processor
	All func() int // the runtime's own choice again; returns it
}

// Runtime sets the process's GOMAXPROCS. All hands the count back to the
// runtime (runtime.SetDefaultGOMAXPROCS) rather than setting the number it
// chose at start: setting any number stops the runtime from following the
// CPUs the process may use (CPU affinity, a cgroup quota changed at run
// time, a board taking a hot core offline), and under load it must follow
// them as it would without the Governor.
func Runtime() Setter {
	return Setter{
		One: func() { runtime.GOMAXPROCS(1) },
		All: func() int { runtime.SetDefaultGOMAXPROCS(); return runtime.GOMAXPROCS(0) },
	}
}

// Governor applies a Policy. Step is the decision; Run samples the
// process's CPU time and calls it.
type Governor struct {
	p     Policy
	set   Setter
	cur   int
	quiet time.Duration // how long the load has been below LowerAt above one
}

// New returns a Governor that starts on one processor (unless p.Max ≤ 1:
// then it never touches GOMAXPROCS).
func New(p Policy, set Setter) *Governor {
	g := &Governor{p: p, set: set, cur: p.Max}
	if p.Max > 1 {
		g.cur = 1
		set.One()
	}
	return g
}

// Procs is the GOMAXPROCS the Governor last set or was handed back.
func (g *Governor) Procs() int { return g.cur }

// Step takes one sample: cpu used over elapsed wall time.
func (g *Governor) Step(cpu, elapsed time.Duration) {
	if elapsed <= 0 || g.p.Max <= 1 {
		return
	}
	load := float64(cpu) / float64(elapsed)
	switch {
	case g.cur == 1 && load >= g.p.RaiseAt:
		g.cur, g.quiet = g.set.All(), 0
	case g.cur > 1 && load < g.p.LowerAt:
		g.quiet += elapsed
		if g.quiet >= g.p.Quiet {
			g.cur, g.quiet = 1, 0
			g.set.One()
		}
	case g.cur > 1:
		g.quiet = 0
	}
}

// Run samples the process's CPU time every p.Every until ctx ends, then
// hands the count back to the runtime.
func (g *Governor) Run(ctx context.Context) {
	if g.p.Max <= 1 {
		return
	}
	defer g.set.All()
	t := time.NewTicker(g.p.Every)
	defer t.Stop()
	lastCPU, lastAt := processCPU(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			cpu := processCPU()
			g.Step(cpu-lastCPU, now.Sub(lastAt))
			lastCPU, lastAt = cpu, now
		}
	}
}

// processCPU is the user and system CPU time of the whole process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
