// Command edgegw-hostile attacks edgegw and Debian's mosquitto the way a
// hostile client on the LAN would, side by side, and reports per attack and
// broker: survived, RSS, CPU, a well-behaved client's p99 round trip during
// vs before, and leaks. See hostile/README.md. Loopback only, bounded in
// count and time (a few minutes for everything).
//
//	edgegw-hostile [-edgegw bin/edgegw] [-mosquitto /usr/sbin/mosquitto]
//	               [-brokers edgegw,mosquitto] [-attacks a,b] [-out hostile/results]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
)

// attack is one hostile behaviour; run must return within its own bound.
type attack struct {
	name string
	run  func(ctx context.Context, addr string) outcome
}

var attacks = []attack{
	{"slowloris", attackSlowloris},
	{"partial-connect", attackPartialConnect},
	{"length-claims", attackLengthClaims},
	{"oversize", attackOversize},
	{"malformed", attackMalformed},
	{"subscription-bomb", attackSubscriptionBomb},
	{"deep-filters", attackDeepFilters},
	{"connect-flood", attackConnectFlood},
	{"id-ping-pong", attackPingPong},
	{"stuck-subscriber", attackStuckSubscriber},
	{"retained-flood", attackRetainedFlood},
	{"wrong-password", attackWrongPassword},
	{"login-flood", attackLoginFlood},
	{"login-flood-names", attackLoginFloodNames},
	{"acl-leaks", attackACL},
}

const (
	baseline    = 2 * time.Second  // probe before the attack
	settle      = time.Second      // after the attack, before the final samples
	attackBound = 60 * time.Second // hard cap per attack (each is far shorter)
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("edgegw-hostile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	edgegwBin := fs.String("edgegw", "bin/edgegw", "edgegw binary")
	mosqBin := fs.String("mosquitto", "/usr/sbin/mosquitto", "mosquitto binary")
	brokerList := fs.String("brokers", "edgegw,mosquitto", "brokers to attack, in order")
	attackList := fs.String("attacks", "", "comma-separated attacks (default all)")
	out := fs.String("out", "hostile/results", "directory for latest.md and latest.jsonl")
	label := fs.String("label", "", "edgegw version for the title (e.g. git describe)")
	from := fs.String("from", "", "only render: read results from this JSON-lines file, write -out/latest.md")
	title := fs.String("title", "", "with -from: the report's title")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *from != "" {
		if err := rerender(*from, *out, *title); err != nil {
			fmt.Fprintln(stderr, "edgegw-hostile:", err)
			return 1
		}
		return 0
	}
	selected, err := selectAttacks(*attackList)
	if err != nil {
		fmt.Fprintln(stderr, "edgegw-hostile:", err)
		return 2
	}
	raiseFileLimit()

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	work, err := os.MkdirTemp("", "edgegw-hostile.")
	if err != nil {
		fmt.Fprintln(stderr, "edgegw-hostile:", err)
		return 1
	}
	defer os.RemoveAll(work)
	// mosquitto started as root drops to user mosquitto, which must reach
	// its password file and ACL inside.
	if err := os.Chmod(work, 0o755); err != nil {
		fmt.Fprintln(stderr, "edgegw-hostile:", err)
		return 1
	}

	var specs []*brokerSpec
	for _, name := range strings.Split(*brokerList, ",") {
		s := &brokerSpec{name: name, dir: filepath.Join(work, name)}
		switch name {
		case "edgegw":
			s.bin = *edgegwBin
		case "mosquitto":
			s.bin = *mosqBin
		default:
			fmt.Fprintf(stderr, "edgegw-hostile: unknown broker %q\n", name)
			return 2
		}
		if err := s.prepare(ctx); err != nil {
			fmt.Fprintln(stderr, "edgegw-hostile:", err)
			return 1
		}
		specs = append(specs, s)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(stderr, "edgegw-hostile:", err)
		return 1
	}
	rawPath := filepath.Join(*out, "latest.jsonl")
	raw, err := os.Create(rawPath)
	if err != nil {
		fmt.Fprintln(stderr, "edgegw-hostile:", err)
		return 1
	}
	defer raw.Close()
	enc := json.NewEncoder(raw)

	start := time.Now()
	load := loadavg()
	var results []Result
	for _, a := range selected {
		for _, s := range specs {
			if ctx.Err() != nil {
				return 130
			}
			r := runOne(ctx, s, a)
			results = append(results, r)
			enc.Encode(r)
			fmt.Fprintf(stdout, "%-18s %-9s survived=%-5v rss %s→%s MiB cpu %.2fs p99 %s→%s ms leaks=%d  %s\n",
				r.Attack, r.Broker, r.Survived, mib(r.RSSBefore), mib(r.RSSPeak), r.CPUSeconds,
				ms(r.P99BeforeUs), ms(r.P99DuringUs), len(r.Leaks), firstNonEmpty(r.Error, r.Note))
		}
	}
	heading := fmt.Sprintf("edgegw hostile-client suite, %s (edgegw %s, %s; %d cores, load before %s; %.0f s)",
		start.UTC().Format("2006-01-02 15:04 MST"), firstNonEmpty(*label, "?"), mosquittoVersion(*mosqBin),
		runtime.NumCPU(), load, time.Since(start).Seconds())
	f, err := os.Create(filepath.Join(*out, "latest.md"))
	if err != nil {
		fmt.Fprintln(stderr, "edgegw-hostile:", err)
		return 1
	}
	writeReport(f, heading, results)
	if err := f.Close(); err != nil {
		fmt.Fprintln(stderr, "edgegw-hostile:", err)
		return 1
	}
	fmt.Fprintln(stdout)
	writeReport(stdout, heading, results)
	return 0
}

// rerender rebuilds outDir/latest.md from a results file (after a change
// of the report code, without attacking anything again).
func rerender(from, outDir, title string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	var results []Result
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r Result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return fmt.Errorf("%s:%d: %w", from, i+1, err)
		}
		results = append(results, r)
	}
	f, err := os.Create(filepath.Join(outDir, "latest.md"))
	if err != nil {
		return err
	}
	writeReport(f, firstNonEmpty(title, "edgegw hostile-client suite (from "+filepath.Base(from)+")"), results)
	return f.Close()
}

func selectAttacks(list string) ([]attack, error) {
	if list == "" {
		return attacks, nil
	}
	var out []attack
	for _, name := range strings.Split(list, ",") {
		found := false
		for _, a := range attacks {
			if a.name == name {
				out = append(out, a)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown attack %q", name)
		}
	}
	return out, nil
}

// runOne starts a fresh broker, runs the probe for the baseline, the attack
// with the probe still running, then checks that a new well-behaved client
// is served.
func runOne(ctx context.Context, s *brokerSpec, a attack) (r Result) {
	r = Result{Attack: a.name, Broker: s.name}
	b, err := s.start(ctx)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer b.stop()
	p, err := startProbe(ctx, b.addr)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	pause(ctx, baseline)
	m0, err := readMem(b.pid)
	if err != nil {
		r.Error = fmt.Sprintf("read memory: %v", err)
		p.stop()
		return r
	}
	cpu0, _ := readCPU(b.pid)
	t0 := time.Now()
	actx, cancel := context.WithTimeout(ctx, attackBound)
	r.outcome = a.run(actx, b.addr)
	cancel()
	t1 := time.Now()
	pause(ctx, settle)
	samples, perr := p.stop()
	if perr != nil {
		r.ProbeErr = perr.Error()
	}
	r.Survived = b.alive()
	if r.Survived {
		if err := wellBehaved(ctx, b.addr); err != nil {
			r.Survived, r.SurviveErr = false, err.Error()
		}
	} else {
		r.SurviveErr = "broker process exited"
	}
	if cpu1, err := readCPU(b.pid); err == nil {
		r.CPUSeconds = cpu1 - cpu0
	}
	if m1, err := readMem(b.pid); err == nil {
		r.RSSPeak, r.RSSEnd = m1.HWM, m1.RSS
	}
	r.RSSBefore = m0.RSS
	r.AttackSeconds = t1.Sub(t0).Seconds()
	before := summarize(samples, t0.Add(-baseline), t0)
	during := summarize(samples, t0, t1)
	r.P99BeforeUs, r.ProbeBefore, r.ProbeLostBefore = float64(before.P99.Microseconds()), before.N, before.Lost
	r.P99DuringUs, r.ProbeDuring, r.ProbeLostDuring = float64(during.P99.Microseconds()), during.N, during.Lost
	return r
}

// wellBehaved: a new client connects, subscribes, publishes at QoS 1 and
// gets its message back, all within 10 s.
func wellBehaved(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l := alice("check")
	l.from = goodIP
	c, _, err := dialMQTT(ctx, addr, l)
	if err != nil {
		return err
	}
	defer c.close()
	if codes, err := c.subscribe(1, "alice/check"); err != nil || len(codes) != 1 || codes[0].IsError() {
		return fmt.Errorf("subscribe: %v %v", codes, err)
	}
	k := collect(c)
	if err := c.send(&packet.Publish{QoS: 1, PacketID: c.nextID(), Topic: "alice/check", Payload: []byte("ok")}); err != nil {
		return err
	}
	if _, found := k.until("alice/check", 10*time.Second); !found {
		return errors.New("own message not delivered within 10 s")
	}
	return nil
}

func raiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func mosquittoVersion(bin string) string {
	out, _ := exec.Command(bin, "-h").CombinedOutput()
	line, _, _ := strings.Cut(string(out), "\n")
	if strings.HasPrefix(line, "mosquitto version") {
		return line
	}
	return "mosquitto ?"
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}
