package metrics

import (
	"bytes"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// The go_* and process_* families keep the names, types and meaning of
// Prometheus' Go client (collectors.NewGoCollector and
// NewProcessCollector), so existing dashboards and the soak runner keep
// working. They are read from runtime/metrics (no stop-the-world
// runtime.ReadMemStats) and /proc/self at scrape time.

// runtimeSamples are the runtime/metrics the go_* families are built from.
var runtimeSamples = []string{
	"/gc/gogc:percent",
	"/gc/gomemlimit:bytes",
	"/gc/heap/allocs:bytes",
	"/gc/heap/allocs:objects",
	"/gc/heap/frees:objects",
	"/gc/heap/goal:bytes",
	"/gc/heap/objects:objects",
	"/gc/heap/tiny/allocs:objects",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/stacks:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/metadata/mcache/free:bytes",
	"/memory/classes/metadata/mcache/inuse:bytes",
	"/memory/classes/metadata/mspan/free:bytes",
	"/memory/classes/metadata/mspan/inuse:bytes",
	"/memory/classes/metadata/other:bytes",
	"/memory/classes/os-stacks:bytes",
	"/memory/classes/other:bytes",
	"/memory/classes/profiling/buckets:bytes",
	"/memory/classes/total:bytes",
	"/sched/gomaxprocs:threads",
	"/sched/goroutines:goroutines",
}

// collectRuntime writes the go_* families.
func collectRuntime(w *expo) {
	s := make([]metrics.Sample, len(runtimeSamples))
	for i, n := range runtimeSamples {
		s[i].Name = n
	}
	metrics.Read(s)
	m := make(map[string]float64, len(s))
	for _, x := range s {
		switch x.Value.Kind() {
		case metrics.KindUint64:
			m[x.Name] = float64(x.Value.Uint64())
		case metrics.KindFloat64:
			m[x.Name] = x.Value.Float64()
		}
	}
	g := func(name, help string, v float64) { w.gauge(name, help).v(v) }
	c := func(name, help string, v float64) { w.counter(name, help).v(v) }

	g("go_goroutines", "Number of goroutines that currently exist.", m["/sched/goroutines:goroutines"])
	threads, _ := runtime.ThreadCreateProfile(nil)
	g("go_threads", "Number of OS threads created.", float64(threads))
	w.gauge("go_info", "Information about the Go environment.").v(1, "version", runtime.Version())
	g("go_sched_gomaxprocs_threads", "The current runtime.GOMAXPROCS setting, or the number of operating system threads that can execute user-level Go code simultaneously.", m["/sched/gomaxprocs:threads"])
	g("go_gc_gogc_percent", "Heap size target percentage configured by the user, otherwise 100.", m["/gc/gogc:percent"])
	g("go_gc_gomemlimit_bytes", "Go runtime memory limit configured by the user, otherwise math.MaxInt64.", m["/gc/gomemlimit:bytes"])

	var gs debug.GCStats
	gs.PauseQuantiles = make([]time.Duration, 5)
	debug.ReadGCStats(&gs)
	sum := w.family("go_gc_duration_seconds", "A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.", "summary")
	for i, q := range []string{"0", "0.25", "0.5", "0.75", "1"} {
		sum.v(gs.PauseQuantiles[i].Seconds(), "quantile", q)
	}
	sum.add("_sum", gs.PauseTotal.Seconds())
	sum.add("_count", float64(gs.NumGC))
	if !gs.LastGC.IsZero() {
		g("go_memstats_last_gc_time_seconds", "Number of seconds since 1970 of last garbage collection.", float64(gs.LastGC.UnixNano())/1e9)
	}

	objects := m["/memory/classes/heap/objects:bytes"]
	unused := m["/memory/classes/heap/unused:bytes"]
	released := m["/memory/classes/heap/released:bytes"]
	free := m["/memory/classes/heap/free:bytes"]
	tiny := m["/gc/heap/tiny/allocs:objects"]
	g("go_memstats_alloc_bytes", "Number of bytes allocated in heap and currently in use. Equals to /memory/classes/heap/objects:bytes.", objects)
	c("go_memstats_alloc_bytes_total", "Total number of bytes allocated in heap until now, even if released already. Equals to /gc/heap/allocs:bytes.", m["/gc/heap/allocs:bytes"])
	g("go_memstats_buck_hash_sys_bytes", "Number of bytes used by the profiling bucket hash table. Equals to /memory/classes/profiling/buckets:bytes.", m["/memory/classes/profiling/buckets:bytes"])
	c("go_memstats_frees_total", "Total number of heap objects frees. Equals to /gc/heap/frees:objects + /gc/heap/tiny/allocs:objects.", m["/gc/heap/frees:objects"]+tiny)
	g("go_memstats_gc_sys_bytes", "Number of bytes used for garbage collection system metadata. Equals to /memory/classes/metadata/other:bytes.", m["/memory/classes/metadata/other:bytes"])
	g("go_memstats_heap_alloc_bytes", "Number of heap bytes allocated and currently in use, same as go_memstats_alloc_bytes. Equals to /memory/classes/heap/objects:bytes.", objects)
	g("go_memstats_heap_idle_bytes", "Number of heap bytes waiting to be used. Equals to /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", released+free)
	g("go_memstats_heap_inuse_bytes", "Number of heap bytes that are in use. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes", objects+unused)
	g("go_memstats_heap_objects", "Number of currently allocated objects. Equals to /gc/heap/objects:objects.", m["/gc/heap/objects:objects"])
	g("go_memstats_heap_released_bytes", "Number of heap bytes released to OS. Equals to /memory/classes/heap/released:bytes.", released)
	g("go_memstats_heap_sys_bytes", "Number of heap bytes obtained from system. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes + /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", objects+unused+released+free)
	c("go_memstats_mallocs_total", "Total number of heap objects allocated, both live and gc-ed. Semantically a counter version for go_memstats_heap_objects gauge. Equals to /gc/heap/allocs:objects + /gc/heap/tiny/allocs:objects.", m["/gc/heap/allocs:objects"]+tiny)
	g("go_memstats_mcache_inuse_bytes", "Number of bytes in use by mcache structures. Equals to /memory/classes/metadata/mcache/inuse:bytes.", m["/memory/classes/metadata/mcache/inuse:bytes"])
	g("go_memstats_mcache_sys_bytes", "Number of bytes used for mcache structures obtained from system. Equals to /memory/classes/metadata/mcache/inuse:bytes + /memory/classes/metadata/mcache/free:bytes.", m["/memory/classes/metadata/mcache/inuse:bytes"]+m["/memory/classes/metadata/mcache/free:bytes"])
	g("go_memstats_mspan_inuse_bytes", "Number of bytes in use by mspan structures. Equals to /memory/classes/metadata/mspan/inuse:bytes.", m["/memory/classes/metadata/mspan/inuse:bytes"])
	g("go_memstats_mspan_sys_bytes", "Number of bytes used for mspan structures obtained from system. Equals to /memory/classes/metadata/mspan/inuse:bytes + /memory/classes/metadata/mspan/free:bytes.", m["/memory/classes/metadata/mspan/inuse:bytes"]+m["/memory/classes/metadata/mspan/free:bytes"])
	g("go_memstats_next_gc_bytes", "Number of heap bytes when next garbage collection will take place. Equals to /gc/heap/goal:bytes.", m["/gc/heap/goal:bytes"])
	g("go_memstats_other_sys_bytes", "Number of bytes used for other system allocations. Equals to /memory/classes/other:bytes.", m["/memory/classes/other:bytes"])
	g("go_memstats_stack_inuse_bytes", "Number of bytes obtained from system for stack allocator in non-CGO environments. Equals to /memory/classes/heap/stacks:bytes.", m["/memory/classes/heap/stacks:bytes"])
	g("go_memstats_stack_sys_bytes", "Number of bytes obtained from system for stack allocator. Equals to /memory/classes/heap/stacks:bytes + /memory/classes/os-stacks:bytes.", m["/memory/classes/heap/stacks:bytes"]+m["/memory/classes/os-stacks:bytes"])
	g("go_memstats_sys_bytes", "Number of bytes obtained from system. Equals to /memory/classes/total:byte.", m["/memory/classes/total:bytes"])
}

// userHZ is the kernel's USER_HZ, the unit of the times in /proc/<pid>/stat
// (100 on every Linux architecture edgegw ships for).
const userHZ = 100

// collectProcess writes the process_* families from /proc/self; on a
// system without /proc it writes nothing.
func collectProcess(w *expo) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return
	}
	// Fields after the command name (which may contain spaces), from
	// field 3 (state) on.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return
	}
	f := strings.Fields(string(b[i+1:]))
	field := func(n int) float64 { // n: field number as in proc(5)
		if n-3 >= len(f) {
			return 0
		}
		v, _ := strconv.ParseFloat(f[n-3], 64)
		return v
	}
	w.counter("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.").
		v((field(14) + field(15)) / userHZ)
	w.gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.").v(field(23))
	w.gauge("process_resident_memory_bytes", "Resident memory size in bytes.").
		v(field(24) * float64(os.Getpagesize()))
	if bt := bootTime(); bt > 0 {
		w.gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.").
			v(bt + field(22)/userHZ)
	}
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		w.gauge("process_open_fds", "Number of open file descriptors.").v(float64(len(ents)))
	}
	if n := limit("Max open files"); n > 0 {
		w.gauge("process_max_fds", "Maximum number of open file descriptors.").v(n)
	}
	if n := limit("Max address space"); n > 0 {
		w.gauge("process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes.").v(n)
	}
	if rx, tx, ok := netDev(); ok {
		w.counter("process_network_receive_bytes_total", "Number of bytes received by the process over the network.").v(rx)
		w.counter("process_network_transmit_bytes_total", "Number of bytes sent by the process over the network.").v(tx)
	}
}

// bootTime is the btime line of /proc/stat: boot time in seconds since the
// epoch; 0 when unknown.
func bootTime() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "btime "); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v
		}
	}
	return 0
}

// limit is the soft limit named name ("Max open files") in
// /proc/self/limits; "unlimited" is reported as the largest uint64, as
// Prometheus' Go client does. 0 when unknown.
func limit(name string) float64 {
	b, err := os.ReadFile("/proc/self/limits")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, name); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				if f[0] == "unlimited" {
					return math.MaxUint64
				}
				v, _ := strconv.ParseFloat(f[0], 64)
				return v
			}
		}
	}
	return 0
}

// netDev sums the received and transmitted bytes of every interface in
// /proc/self/net/dev (the process's network namespace).
func netDev() (rx, tx float64, ok bool) {
	b, err := os.ReadFile("/proc/self/net/dev")
	if err != nil {
		return 0, 0, false
	}
	for line := range strings.Lines(string(b)) {
		_, rest, found := strings.Cut(line, ":")
		if !found {
			continue // the two header lines
		}
		f := strings.Fields(rest)
		if len(f) < 9 {
			continue
		}
		r, _ := strconv.ParseFloat(f[0], 64)
		t, _ := strconv.ParseFloat(f[8], 64)
		rx, tx = rx+r, tx+t
	}
	return rx, tx, true
}
