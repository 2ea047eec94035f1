// Command fleet runs a fleet of edgegw gateways from one config file
// against a 3-node NATS cluster with MQTT on 127.0.0.1, kills the node
// holding the most gateways and a few gateways (kill -9), and reports what
// arrived, what was lost or duplicated, how long each gateway took to fail
// over, and how long a client id collision takes to be named. It exits 1
// when one of those promises fails, 2 when the run itself could not be
// done. `make fleet` builds bin/edgegw and runs it; bench/README.md says
// what it measures.
package main

import (
	"context"
	_ "embed"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

//go:embed fleet.yaml
var fleetConfig []byte

type params struct {
	bin          string
	gateways     int
	rate         int
	basePort     int
	reconnectMin time.Duration
	reconnectMax time.Duration
	maxInflight  int
	publish      time.Duration
	workDir      string
	keep         bool
	report       string
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "node" {
		os.Exit(runNode(os.Args[2:]))
	}
	var p params
	flag.StringVar(&p.bin, "edgegw", "bin/edgegw", "the edgegw binary")
	flag.IntVar(&p.gateways, "gateways", 20, "gateways in the fleet")
	flag.IntVar(&p.rate, "rate", 20, "messages per second per gateway")
	flag.IntVar(&p.basePort, "base-port", 24400, "first of the ports used (127.0.0.1): nodes from it, gateways from +100")
	flag.DurationVar(&p.reconnectMin, "reconnect-min", 100*time.Millisecond, "bridges' reconnect_min")
	flag.DurationVar(&p.reconnectMax, "reconnect-max", 2*time.Second, "bridges' reconnect_max")
	flag.IntVar(&p.maxInflight, "max-inflight", 32, "bridges' max_inflight")
	flag.DurationVar(&p.publish, "publish", 45*time.Second, "how long the publishers run (the kills happen in it)")
	flag.StringVar(&p.workDir, "dir", "", "working directory (default: a new temporary one, removed after a passing run)")
	flag.BoolVar(&p.keep, "keep", false, "keep the working directory (logs, spools) after a passing run")
	flag.StringVar(&p.report, "report", "", "also write the report to this file")
	flag.Parse()
	if p.publish < 40*time.Second {
		fmt.Fprintln(os.Stderr, "fleet: -publish must be at least 40s (the kills are placed in it)")
		os.Exit(2)
	}
	bin, err := filepath.Abs(p.bin)
	if err == nil {
		_, err = os.Stat(bin)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "fleet: %v (build it with make build)\n", err)
		os.Exit(2)
	}
	p.bin = bin

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, p))
}

// run owns every process and node it starts and stops them all before it
// returns, on every path (a failure, Ctrl-C).
func run(ctx context.Context, p params) int {
	dir := p.workDir
	if dir == "" {
		d, err := os.MkdirTemp("", "edgegw-fleet-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "fleet:", err)
			return 2
		}
		dir = d
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		return 2
	}
	r := &runner{p: p, dir: dir, out: os.Stdout, killBound: map[*gateway]int{}, killRate: map[*gateway]float64{}}
	defer r.cleanup()
	code := r.run(ctx)
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "fleet: interrupted")
		code = 2
	}
	if code == 0 && !p.keep && p.workDir == "" {
		defer os.RemoveAll(dir)
	} else {
		fmt.Fprintf(os.Stderr, "fleet: logs and spools kept in %s\n", dir)
	}
	return code
}

type runner struct {
	p   params
	dir string
	out io.Writer

	cl       *cluster
	gws      []*gateway
	subs     []*subscriber
	collided []*gateway

	killBound map[*gateway]int     // per gateway killed with -9: copies allowed
	killRate  map[*gateway]float64 // its acked rate just before the kill

	report strings.Builder
	failed []string
}

func (r *runner) logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "%s fleet: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, a...))
}

// say adds a line to the report.
func (r *runner) say(format string, a ...any) {
	fmt.Fprintf(&r.report, format+"\n", a...)
}

// promise records a promise's outcome in the report.
func (r *runner) promise(ok bool, format string, a ...any) {
	s := fmt.Sprintf(format, a...)
	if ok {
		r.say("- PASS %s", s)
	} else {
		r.say("- FAIL %s", s)
		r.failed = append(r.failed, s)
	}
}

func (r *runner) cleanup() {
	for _, s := range r.subs {
		s.stop()
	}
	var wg sync.WaitGroup
	for _, g := range append(slices.Clone(r.gws), r.collided...) {
		wg.Go(func() { g.signal(syscall.SIGKILL) })
	}
	wg.Wait()
	if r.cl != nil {
		r.cl.stop()
	}
}

func (r *runner) run(ctx context.Context) int {
	p := r.p
	conf := filepath.Join(r.dir, "fleet.yaml")
	if err := os.WriteFile(conf, fleetConfig, 0o644); err != nil {
		r.logf("%v", err)
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		r.logf("%v", err)
		return 2
	}
	r.cl = newCluster(self, r.dir, 3, p.basePort)
	r.logf("starting 3 nats-server nodes (MQTT on %s, %s, %s)", r.cl.nodes[0].mqttURL(), r.cl.nodes[1].mqttURL(), r.cl.nodes[2].mqttURL())
	t0 := time.Now()
	if err := r.cl.start(); err != nil {
		r.logf("%v", err)
		return 2
	}
	// The MQTT listener answers once the cluster's JetStream has a leader
	// and the account's MQTT streams exist: a kept-session CONNECT to
	// each node says so.
	for _, n := range r.cl.nodes {
		pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		_, err := probeConnect(pctx, n.mqttURL(), "fleet-ready-"+n.name)
		cancel()
		if err != nil {
			r.logf("cluster not ready: %v", err)
			return 2
		}
	}
	r.logf("cluster ready in %v", time.Since(t0).Round(time.Millisecond))

	env := []string{
		"FLEET_NODE_1=" + r.cl.nodes[0].mqttURL(),
		"FLEET_NODE_2=" + r.cl.nodes[1].mqttURL(),
		"FLEET_NODE_3=" + r.cl.nodes[2].mqttURL(),
		"FLEET_RECONNECT_MIN=" + p.reconnectMin.String(),
		"FLEET_RECONNECT_MAX=" + p.reconnectMax.String(),
		fmt.Sprintf("FLEET_MAX_INFLIGHT=%d", p.maxInflight),
	}
	for i := range p.gateways {
		id := fmt.Sprintf("%02d", i+1)
		r.gws = append(r.gws, newGateway(p.bin, conf, r.dir, "gw-"+id, id, p.basePort+100+i, p.basePort+200+i, env))
	}
	r.say("# make fleet: %d gateways, 3-node NATS cluster", p.gateways)
	r.say("")
	r.say("%s; edgegw %s; %d gateways from one config file (bench/fleet/fleet.yaml), address_order spread over 3 nodes, reconnect_min %v, reconnect_max %v, max_inflight %d, QoS 1 at %d msg/s per gateway for %v, all on 127.0.0.1.",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), edgegwVersion(p.bin), p.gateways, p.reconnectMin, p.reconnectMax, p.maxInflight, p.rate, p.publish)
	r.say("")

	if code := r.fleet(ctx); code != 0 {
		return code
	}
	if ctx.Err() != nil {
		return 2
	}
	if code := r.collision(ctx, conf, env); code != 0 {
		return code
	}

	r.say("")
	if len(r.failed) == 0 {
		r.say("All promises held.")
	} else {
		r.say("%d promise(s) failed.", len(r.failed))
	}
	fmt.Fprint(r.out, r.report.String())
	if r.p.report != "" {
		if err := os.WriteFile(r.p.report, []byte(r.report.String()), 0o644); err != nil {
			r.logf("%v", err)
			return 2
		}
	}
	if len(r.failed) > 0 {
		return 1
	}
	return 0
}

func edgegwVersion(bin string) string {
	out, err := execOutput(bin, "version")
	if err != nil {
		return "(unknown version)"
	}
	first, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	return strings.TrimPrefix(first, "edgegw ")
}

// waitFor polls cond every 50 ms until it holds or limit passes.
func waitFor(ctx context.Context, limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
