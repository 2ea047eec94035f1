package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/cmd/edgegw/internal/metrics"
	"github.com/edgegw/edgegw/internal/config"
)

// ledgerStatus converts a bridge's ledger for /metrics and /ledger; nil
// while its spool is not open.
func ledgerStatus(b *bridge.Bridge) *metrics.Ledger {
	l, ok := b.Ledger()
	if !ok {
		return nil
	}
	conv := func(m map[string]uint64) map[string]int64 {
		out := make(map[string]int64, len(m))
		for k, v := range m {
			out[k] = int64(v)
		}
		return out
	}
	lanes := make(map[string]metrics.LaneLedger, len(l.Lanes))
	for name, ll := range l.Lanes {
		var dropped uint64
		for _, n := range ll.Dropped {
			dropped += n
		}
		lanes[name] = metrics.LaneLedger{Accepted: int64(ll.Accepted), Delivered: int64(ll.Delivered),
			Live: int64(ll.Live), Dropped: int64(dropped), Unknown: int64(ll.Unknown)}
	}
	return &metrics.Ledger{
		Accepted: int64(l.Accepted), Delivered: int64(l.Delivered), InFlight: int64(l.InFlight),
		Queued: int64(l.Queued), Dropped: conv(l.Dropped), Unknown: int64(l.Unknown),
		Mismatch: int64(l.Mismatch), Rejected: conv(l.Rejected), AddsUp: l.AddsUp, Lanes: lanes,
	}
}

// cmdLedger prints the running gateway's /ledger: it reads metrics.address
// from the config and asks the gateway there.
func cmdLedger(args []string, stdout, stderr io.Writer) int {
	ca, code, ok := configFlags("ledger", args, stdout, stderr, true)
	if !ok {
		return code
	}
	env, err := newLoadEnv(ca.envFile, ca.listen)
	if err != nil {
		fmt.Fprintf(stderr, "edgegw ledger: %v\n", err)
		return exitUsage
	}
	cfg, err := config.Load(ca.path, env.env)
	if err != nil {
		fmt.Fprintf(stderr, "edgegw ledger: %v\n", err)
		return exitUsage
	}
	addr := cfg.Metrics.Address
	if addr == "" {
		fmt.Fprintln(stderr, "edgegw ledger: metrics.address is off in the config; the ledger is served there (/ledger)")
		return exitUsage
	}
	if host, port, err := net.SplitHostPort(addr); err == nil && (host == "" || host == "0.0.0.0" || host == "::") {
		addr = net.JoinHostPort("127.0.0.1", port)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/ledger", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "edgegw ledger: is the gateway running? %v\n", err)
		return exitFailure
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "edgegw ledger: %s answered %s\n", addr, resp.Status)
		return exitFailure
	}
	if _, err := io.Copy(stdout, resp.Body); err != nil {
		fmt.Fprintf(stderr, "edgegw ledger: %v\n", err)
		return exitFailure
	}
	return exitOK
}
