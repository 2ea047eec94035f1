// Package gcheadroom keeps the garbage collector's headroom (how far the
// heap may grow past what the last collection found live before the next
// one starts) at least a fixed number of bytes, on top of gc_percent.
//
// gc_percent alone scales the headroom with the live data. A gateway that
// serves a few hundred sensors has little of it (issue 16's fleet of 1,000
// sensors: about 2 MB of heap and 2 MB of goroutine stacks), so at
// gc_percent 50 the collector ran every 4 s and each cycle scanned every
// connection's stack, for a headroom of about 2 MB. With a floor of 8 MiB
// the same fleet's broker used 0.90x the CPU for 3 MiB more resident
// memory (bench/README.md, "Issue 16, session 9"). A large live heap
// (thousands of connections, queued messages) gets gc_percent's
// proportional headroom as before, so the memory an idle connection costs
// does not change, and the soft memory limit still bounds the whole.
//
// The Go runtime has no such knob, so a Keeper sets the GC percent after
// each collection: the runtime's heap goal is live + (live + stacks +
// globals) × percent / 100, and the Keeper picks the least percent, no
// lower than gc_percent, for which that is live + floor or more.
package gcheadroom

import (
	"math"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
)

// Percent is the GC percent that gives a headroom of at least floor
// bytes over scan bytes (live heap + stacks + globals, as the last
// collection measured them), never below percent. scan ≤ 0 (no
// collection yet) or floor ≤ 0 leave percent.
func Percent(percent int, floor, scan int64) int {
	if floor <= 0 || scan <= 0 {
		return percent
	}
	floor = min(floor, math.MaxInt64/100-scan) // beyond that, no difference: no overflow
	need := (floor*100 + scan - 1) / scan      // ceil(floor × 100 / scan)
	if need > math.MaxInt32 {                  // the runtime takes an int32
		need = math.MaxInt32
	}
	return max(percent, int(need))
}

// Keeper applies Percent after every garbage collection.
type Keeper struct {
	percent int
	floor   int64
	set     func(int) int // runtime/debug.SetGCPercent
	scan    func() int64  // what the last collection measured; ScanBytes

	stopped atomic.Bool
	applied atomic.Int64 // the percent last set
	runs    atomic.Int64 // after-collection calls, stopped or not (tests)
}

// Start returns a running Keeper: from the next collection on, each one
// leaves the GC percent at Percent(percent, floor, ScanBytes()). set is
// runtime/debug.SetGCPercent (tests may watch it). It runs no goroutine of
// its own: the runtime calls it from its cleanup goroutine, once per
// collection, until Stop. percent must be ≥ 0 (a collector turned off has
// no headroom to keep).
func Start(percent int, floor int64, set func(int) int) *Keeper {
	k := &Keeper{percent: percent, floor: floor, set: set, scan: ScanBytes}
	k.applied.Store(int64(percent))
	k.arm()
	return k
}

// Stop stops adjusting. The GC percent stays where the last collection
// left it.
func (k *Keeper) Stop() { k.stopped.Store(true) }

// Applied is the GC percent the Keeper last set (gc_percent until the
// first collection).
func (k *Keeper) Applied() int { return int(k.applied.Load()) }

// sentinel is allocated and dropped at once, so that the next collection
// finds it unreachable and the runtime runs its cleanup: the Keeper's
// "after each collection". It holds a pointer so that it is never packed
// with other small objects (the tiny allocator takes pointer-free ones
// only), which would tie its end to theirs.
type sentinel struct{ _ *byte }

func (k *Keeper) arm() {
	runtime.AddCleanup(&sentinel{}, (*Keeper).afterGC, k)
}

func (k *Keeper) afterGC() {
	k.runs.Add(1)
	if k.stopped.Load() {
		return
	}
	p := Percent(k.percent, k.floor, k.scan())
	if int64(p) != k.applied.Load() {
		k.set(p)
		k.applied.Store(int64(p))
	}
	k.arm()
}

// ScanBytes is the live heap, stacks and globals the last collection
// measured: what the runtime's heap goal takes the GC percent of.
func ScanBytes() int64 {
	s := [...]metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/scan/stack:bytes"},
		{Name: "/gc/scan/globals:bytes"},
	}
	metrics.Read(s[:])
	var n int64
	for _, v := range s {
		if v.Value.Kind() == metrics.KindUint64 {
			n += int64(v.Value.Uint64())
		}
	}
	return n
}
