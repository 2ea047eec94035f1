// Command gatewayd is a stand-in for bin/edgegw used by bench/run.sh while
// cmd/edgegw does not build: the same broker core (gateway.New and a
// listeners.TCP) with the benchmark's limits, no config file, no bridge.
// Results obtained with it are labelled "edgegw-core" in the report.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"syscall"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/internal/config"
	"github.com/edgegw/edgegw/listeners"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18831", "listen address")
	var o gateway.Options
	flag.IntVar(&o.MaxConnections, "max-connections", 12000, "limits.max_connections")
	flag.IntVar(&o.MaxInflight, "max-inflight", 32, "limits.max_inflight")
	flag.IntVar(&o.MaxQueuedMessages, "max-queued-messages", 1000, "limits.max_queued_messages")
	flag.Int64Var(&o.MaxQueuedBytes, "max-queued-bytes", 4<<20, "limits.max_queued_bytes")
	flag.Int64Var(&o.MemoryBudget, "memory-budget", 64<<20, "limits.memory_budget")
	gcPercent := flag.Int("gc-percent", config.DefaultGCPercent, "limits.gc_percent (GOGC in the environment wins)")
	memLimit := flag.Int64("memory-limit", 0, "limits.memory_limit; 0 = derived from memory-budget (GOMEMLIMIT in the environment wins)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	memProfile := flag.String("memprofile", "", "write an allocation profile at exit to this file")
	flag.Parse()
	o.AllowAnonymous = true
	// The runtime settings cmd/edgegw applies from its limits section.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(*gcPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		l := config.Limits{MemoryBudget: o.MemoryBudget, MemoryLimit: *memLimit}
		debug.SetMemoryLimit(l.DerivedMemoryLimit())
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			slog.Error("cpuprofile", "err", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		runtime.MemProfileRate = 64 << 10
		defer func() {
			if f, err := os.Create(*memProfile); err == nil {
				pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := gateway.New(o, log)
	l := &listeners.TCP{Name: "bench", Address: *addr, Log: log}
	if err := l.Listen(); err != nil {
		log.Error("listen", "err", err)
		os.Exit(1)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); srv.Run(ctx) }()
	go func() { defer wg.Done(); l.Serve(ctx, srv.ServeConn) }()
	wg.Wait()
}
