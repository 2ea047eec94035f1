package main

// The end-to-end harness: every test that runs the real edgegw binary
// builds its config here (gwConfig, in Go), starts the binary with
// startGateway (stdout and stderr in a log the test searches and that is
// printed when it fails), waits for it to be ready from its own log, stops
// it (SIGTERM and wait, or SIGKILL for a crash), restarts it on the same
// files, and reads its /metrics, /status.json and /healthz. Debian
// mosquitto is the cloud broker (startCloud). A bridge test ranges over
// uplinks() so that it runs against every uplink implementation.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"

	"github.com/edgegw/edgegw/internal/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		testBinary.remove()
		os.Exit(code)
	}))
}

// binaryCache is the edgegw binary built once for the whole test process:
// go build of this package, as the Makefile builds it (without -race, as
// shipped), in a directory every user may read (a test runs it as nobody).
type binaryCache struct {
	once      sync.Once
	dir, path string
	err       error
}

// testBinary is written once, by the first test that needs the binary.
var testBinary binaryCache

func (b *binaryCache) build() {
	b.once.Do(func() {
		b.dir, b.err = os.MkdirTemp("", "edgegw-e2e-")
		if b.err != nil {
			return
		}
		if b.err = os.Chmod(b.dir, 0o755); b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, "edgegw")
		if out, err := exec.Command("go", "build", "-o", b.path, ".").CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
}

// remove deletes the binary; after it no test can build it again.
func (b *binaryCache) remove() {
	b.once.Do(func() {})
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

// edgegwBinary returns the path of the built binary. Under -short it
// skips the test: the binary tests are the long ones.
func edgegwBinary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the binary")
	}
	testBinary.build()
	if testBinary.err != nil {
		t.Fatal(testBinary.err)
	}
	return testBinary.path
}

// freePort returns a 127.0.0.1 address nobody listens on right now.
func freePort(t testing.TB) string {
	t.Helper()
	// Below the kernel's ephemeral range (32768-60999 here): a port the
	// tests give up and take again (a cloud broker restarted) is never
	// handed meanwhile to another process's bind(":0") or outgoing
	// connection. Seen in full-suite runs: a restarted mosquitto could not
	// bind, something else answered on its port, and the bridge delivered
	// its backlog there.
	for range 200 {
		port := 20000 + rand.IntN(12000)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		addr := l.Addr().String()
		l.Close()
		return addr
	}
	t.Fatal("no free port in 20000-32000")
	return ""
}

// hostPort splits a "host:port" the tests made themselves.
func hostPort(addr string) (host, port string) {
	host, port, _ = net.SplitHostPort(addr)
	return host, port
}

// The config, built in Go and written as YAML. Only what a test sets is
// written (omitempty), so the binary's defaults apply to the rest;
// metrics.address is always written, since "" turns metrics off.

type gwConfig struct {
	Log         *logConf         `yaml:"log,omitempty"`
	Listeners   []listenerConf   `yaml:"listeners"`
	Metrics     metricsConf      `yaml:"metrics"`
	Limits      map[string]any   `yaml:"limits,omitempty"`
	Sessions    map[string]any   `yaml:"sessions,omitempty"`
	Auth        *authConf        `yaml:"auth,omitempty"`
	Persistence *persistenceConf `yaml:"persistence,omitempty"`
	Bridges     []*bridgeConf    `yaml:"bridges,omitempty"`
}

type logConf struct {
	Level  string `yaml:"level,omitempty"`
	Format string `yaml:"format,omitempty"`
}

type listenerConf struct {
	Name    string         `yaml:"name"`
	Type    string         `yaml:"type,omitempty"`
	Address string         `yaml:"address,omitempty"`
	Device  string         `yaml:"device,omitempty"`
	Baud    int            `yaml:"baud,omitempty"`
	Framing string         `yaml:"framing,omitempty"`
	TLS     map[string]any `yaml:"tls,omitempty"`
}

type metricsConf struct {
	Address         string `yaml:"address"`
	BridgeDownAfter string `yaml:"bridge_down_after,omitempty"`
}

type authConf struct {
	AllowAnonymous *bool  `yaml:"allow_anonymous,omitempty"`
	PasswordFile   string `yaml:"password_file,omitempty"`
	ACLFile        string `yaml:"acl_file,omitempty"`
}

type persistenceConf struct {
	Dir          string `yaml:"dir"`
	Sync         string `yaml:"sync,omitempty"`
	SyncInterval string `yaml:"sync_interval,omitempty"`
}

// bridgeConf is one bridges[] entry. Keys without a field go in Extra
// (With sets them).
type bridgeConf struct {
	Name      string         `yaml:"name"`
	Addresses []string       `yaml:"addresses"`
	ClientID  string         `yaml:"client_id,omitempty"`
	Proto     string         `yaml:"protocol,omitempty"`
	Topics    []topicConf    `yaml:"topics"`
	Extra     map[string]any `yaml:",inline"`
}

type topicConf struct {
	Pattern      string `yaml:"pattern"`
	Direction    string `yaml:"direction,omitempty"`
	QoS          int    `yaml:"qos,omitempty"`
	RemotePrefix string `yaml:"remote_prefix,omitempty"`
	Priority     string `yaml:"priority,omitempty"`
	MaxAge       string `yaml:"max_age,omitempty"`
}

// Protocol sets the uplink's MQTT version: "3.1.1", "5" or "auto".
func (b *bridgeConf) Protocol(p string) *bridgeConf { b.Proto = p; return b }

// Uplink makes the bridge use the uplink u (see uplinks).
func (b *bridgeConf) Uplink(u uplink) *bridgeConf { u.apply(b); return b }

// With sets any other key of the bridge (keepalive, ack_timeout, spool...).
func (b *bridgeConf) With(key string, value any) *bridgeConf {
	if b.Extra == nil {
		b.Extra = map[string]any{}
	}
	b.Extra[key] = value
	return b
}

// FastReconnect: the bridge retries every 100-300 ms, so a test waits
// little for it to find its cloud again.
func (b *bridgeConf) FastReconnect() *bridgeConf {
	return b.With("reconnect_min", "100ms").With("reconnect_max", "300ms")
}

// Out adds an out rule (local to cloud).
func (b *bridgeConf) Out(pattern string, qos int) *bridgeConf {
	return b.Topic(topicConf{Pattern: pattern, Direction: "out", QoS: qos})
}

// In adds an in rule (cloud to local).
func (b *bridgeConf) In(pattern string, qos int) *bridgeConf {
	return b.Topic(topicConf{Pattern: pattern, Direction: "in", QoS: qos})
}

// Topic adds a rule with every field the test chooses.
func (b *bridgeConf) Topic(tc topicConf) *bridgeConf { b.Topics = append(b.Topics, tc); return b }

// uplink is one implementation of a bridge's connection to its cloud
// broker, chosen by the bridge's config.
type uplink struct {
	Name  string
	apply func(*bridgeConf)
}

// uplinks lists the uplinks every bridge test runs against (with t.Run,
// named by Name): the MQTT 3.1.1 and the MQTT 5 one.
func uplinks() []uplink {
	return []uplink{
		{Name: "3.1.1", apply: func(b *bridgeConf) { b.Proto = "3.1.1" }},
		{Name: "5", apply: func(b *bridgeConf) { b.Proto = "5" }},
	}
}

// forEachUplink runs f as a subtest per uplink.
func forEachUplink(t *testing.T, f func(t *testing.T, up uplink)) {
	for _, up := range uplinks() {
		t.Run(up.Name, func(t *testing.T) { f(t, up) })
	}
}

// harness is one edgegw config and the binary run from it: started,
// stopped and restarted on the same files.
type harness struct {
	t   *testing.T
	Cfg gwConfig
	// Addr is the first listener's address ("lan"), Metrics the metrics
	// server's ("" when metrics are off).
	Addr, Metrics string
	// ConfigPath is where Start writes Cfg; Command may run the binary
	// another way (default: edgegw --config ConfigPath).
	ConfigPath string
	Command    func(bin, config string) *exec.Cmd
	// Prepare is called with the command and the write end of the log
	// pipe (its stdout and stderr) before each start.
	Prepare func(cmd *exec.Cmd, stderr *os.File)

	proc *gwProcess
	runs []*gwProcess
}

// newHarness is a config with one TCP listener "lan" and metrics, each on
// a free port; the test adds to g.Cfg before Start.
func newHarness(t *testing.T) *harness {
	t.Helper()
	g := &harness{t: t, Addr: freePort(t), Metrics: freePort(t)}
	g.Cfg.Listeners = []listenerConf{{Name: "lan", Type: "tcp", Address: g.Addr}}
	g.Cfg.Metrics.Address = g.Metrics
	g.ConfigPath = filepath.Join(t.TempDir(), "edgegw.yaml")
	t.Cleanup(g.cleanup)
	return g
}

// NoMetrics turns the metrics server off.
func (g *harness) NoMetrics() *harness { g.Metrics = ""; g.Cfg.Metrics.Address = ""; return g }

// Persist keeps state in a new directory (returned) with the sync mode
// and interval ("" for the default).
func (g *harness) Persist(sync, interval string) string {
	dir := g.t.TempDir()
	g.Cfg.Persistence = &persistenceConf{Dir: dir, Sync: sync, SyncInterval: interval}
	return dir
}

// Bridge adds a bridge to the given cloud addresses (host:port, tcp://
// added) with client id edge-<name>.
func (g *harness) Bridge(name string, addrs ...string) *bridgeConf {
	b := &bridgeConf{Name: name, ClientID: "edge-" + name}
	for _, a := range addrs {
		if !strings.Contains(a, "://") {
			a = "tcp://" + a
		}
		b.Addresses = append(b.Addresses, a)
	}
	g.Cfg.Bridges = append(g.Cfg.Bridges, b)
	return b
}

// Listener adds a listener.
func (g *harness) Listener(l listenerConf) { g.Cfg.Listeners = append(g.Cfg.Listeners, l) }

// Auth sets the auth section; anonymous says whether anonymous clients
// may connect.
func (g *harness) Auth(anonymous bool, passwordFile, aclFile string) {
	g.Cfg.Auth = &authConf{AllowAnonymous: &anonymous, PasswordFile: passwordFile, ACLFile: aclFile}
}

// WriteConfig writes Cfg to ConfigPath (Start does; a test calls it
// before a SIGHUP).
func (g *harness) WriteConfig() {
	g.t.Helper()
	b, err := yaml.Marshal(&g.Cfg)
	if err != nil {
		g.t.Fatalf("config: %v", err)
	}
	if err := os.WriteFile(g.ConfigPath, b, 0o600); err != nil {
		g.t.Fatal(err)
	}
}

// Start writes the config, starts the binary and waits until it is ready.
func (g *harness) Start() *harness {
	g.t.Helper()
	g.Launch()
	g.WaitReady()
	return g
}

// Launch writes the config and starts the binary without waiting.
func (g *harness) Launch() {
	g.t.Helper()
	if g.proc != nil && !g.proc.exited() {
		g.t.Fatal("edgegw started twice")
	}
	g.WriteConfig()
	bin := edgegwBinary(g.t)
	var cmd *exec.Cmd
	if g.Command != nil {
		cmd = g.Command(bin, g.ConfigPath)
	} else {
		cmd = exec.Command(bin, "--config", g.ConfigPath)
	}
	p := startProcess(g.t, cmd, g.Prepare)
	g.proc = p
	g.runs = append(g.runs, p)
	// Registered now, so it runs before the cleanups of what the test
	// set up earlier (a directory to remove, a mount to undo).
	g.t.Cleanup(func() { p.end(syscall.SIGKILL) })
}

// WaitReady waits for the "edgegw started" line: every listener and the
// metrics server are bound by then. It fails at once if the process ended.
func (g *harness) WaitReady() {
	g.t.Helper()
	testutil.Eventually(g.t, 20*time.Second, "edgegw started", func() bool {
		if g.proc.exited() {
			g.t.Fatalf("edgegw exited before it was ready: %v\n%s", g.proc.err, g.proc.logs())
		}
		return strings.Contains(g.proc.logs(), "edgegw started")
	})
}

// Logs is what the running (or last) process wrote so far.
func (g *harness) Logs() string { return g.proc.logs() }

// WaitLog waits until the current process's log contains s.
func (g *harness) WaitLog(s string) {
	g.t.Helper()
	testutil.Eventually(g.t, 20*time.Second, fmt.Sprintf("log line %q", s), func() bool { return strings.Contains(g.Logs(), s) })
}

// Pid is the running process's id.
func (g *harness) Pid() int { return g.proc.cmd.Process.Pid }

// Signal sends sig to the running process.
func (g *harness) Signal(sig os.Signal) { g.proc.cmd.Process.Signal(sig) }

// Reload writes the config and sends SIGHUP; it returns when the process
// logged that it reloaded (once more than before), or that a part of the
// reload failed.
func (g *harness) Reload() {
	g.t.Helper()
	count := func() int {
		l := g.Logs()
		return strings.Count(l, "msg=reloaded") + strings.Count(l, "msg=\"reload incomplete")
	}
	before := count()
	g.WriteConfig()
	g.Signal(syscall.SIGHUP)
	testutil.Eventually(g.t, 20*time.Second, "reload done", func() bool { return count() > before })
}

// Stop ends the process with SIGTERM and waits: it must exit with 0.
func (g *harness) Stop() {
	g.t.Helper()
	if err := g.proc.end(syscall.SIGTERM); err != nil {
		g.t.Fatalf("edgegw exited with %v after SIGTERM\n%s", err, g.Logs())
	}
}

// Kill ends the process with SIGKILL (a crash: nothing flushed) and waits.
func (g *harness) Kill() {
	g.t.Helper()
	g.proc.end(syscall.SIGKILL)
}

// WaitExit waits (at most 20 s) for the process to end by itself, and
// returns its exit status.
func (g *harness) WaitExit() int {
	g.t.Helper()
	select {
	case <-g.proc.done:
	case <-time.After(20 * time.Second):
		g.t.Fatal("edgegw did not exit")
	}
	return g.proc.cmd.ProcessState.ExitCode()
}

// Restart stops the process with SIGTERM and starts it again on the same
// config and files.
func (g *harness) Restart() {
	g.t.Helper()
	g.Stop()
	g.Start()
}

// cleanup prints the log of every run of a failed test.
func (g *harness) cleanup() {
	if g.t.Failed() {
		for i, p := range g.runs {
			g.t.Logf("edgegw log (run %d of %d):\n%s", i+1, len(g.runs), p.logs())
		}
	}
}

// Get fetches a path of the metrics server: status, header and body
// (status 0 and the error as body when it cannot).
func (g *harness) Get(path string) (int, http.Header, string) {
	resp, err := http.Get("http://" + g.Metrics + path)
	if err != nil {
		return 0, nil, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// Healthz is /healthz's status and body.
func (g *harness) Healthz() (int, string) {
	code, _, body := g.Get("/healthz")
	return code, body
}

// MetricsMap reads /metrics into a map from series (name and labels, as
// printed) to value; nil when it cannot be read.
func (g *harness) MetricsMap() map[string]float64 {
	code, _, body := g.Get("/metrics")
	if code != http.StatusOK {
		return nil
	}
	return parseMetrics(body)
}

func parseMetrics(body string) map[string]float64 {
	m := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m
}

// Metric is one series' value (-1 when it cannot be read or is missing).
func (g *harness) Metric(series string) float64 {
	if v, ok := g.MetricsMap()[series]; ok {
		return v
	}
	return -1
}

// Status decodes /status.json into v.
func (g *harness) Status(v any) error {
	code, _, body := g.Get("/status.json")
	if code != http.StatusOK {
		return fmt.Errorf("/status.json: %d %s", code, body)
	}
	return json.Unmarshal([]byte(body), v)
}

// Client connects a paho client to the gateway (see mqttClient).
func (g *harness) Client(id string, persistent bool) mqtt.Client {
	g.t.Helper()
	return mqttClient(g.t, g.Addr, id, persistent)
}

// Mosq runs mosquitto_pub or mosquitto_sub against the gateway (-h and -p
// added) and returns its output; it must succeed within 30 s.
func (g *harness) Mosq(tool string, args ...string) string {
	g.t.Helper()
	return mosq(g.t, g.Addr, tool, args...)
}

func mosq(t testing.TB, addr, tool string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	host, port := hostPort(addr)
	out, err := exec.CommandContext(ctx, tool, append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", tool, args, err, out)
	}
	return string(out)
}

// gwProcess is one run of a binary, its stdout and stderr in a log.
type gwProcess struct {
	cmd  *exec.Cmd
	log  testutil.LogBuffer
	done chan struct{} // closed when it exited and its log is complete
	err  error         // its exit, once done is closed
}

// startProcess starts cmd with its stdout and stderr written to the
// returned process's log. prepare (may be nil) sees the command and the
// pipe's write end before the start.
func startProcess(t testing.TB, cmd *exec.Cmd, prepare func(*exec.Cmd, *os.File)) *gwProcess {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if prepare != nil {
		prepare(cmd, w)
	}
	p := &gwProcess{cmd: cmd, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		t.Fatalf("start %v: %v", cmd.Args, err)
	}
	w.Close() // the child holds its own copy: EOF once it exits
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.log.Write([]byte(sc.Text() + "\n"))
		}
		io.Copy(io.Discard, r) // a line longer than the buffer: drain to EOF
		r.Close()
		p.err = cmd.Wait()
	}()
	return p
}

func (p *gwProcess) logs() string { return p.log.String() }

func (p *gwProcess) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// end sends sig unless the process already exited, and waits (at most
// 20 s, then SIGKILL) for its exit, which it returns.
func (p *gwProcess) end(sig syscall.Signal) error {
	if !p.exited() {
		p.cmd.Process.Signal(sig)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
			return fmt.Errorf("did not exit within 20 s of %v", sig)
		}
	}
	return p.err
}

// cloud is Debian mosquitto as the cloud broker on a free port.
type cloud struct {
	*testutil.Mosquitto
	Addr string
}

// startCloud starts mosquitto with allow_anonymous true and the extra
// config lines conf. With persistent it saves its state on Stop and loads
// it on the next Start, so a persistent subscriber's session survives.
func startCloud(t testing.TB, persistent bool, conf ...string) *cloud {
	t.Helper()
	return startCloudAt(t, freePort(t), persistent, conf...)
}

// startCloudAt is startCloud on a given address (a cloud that comes up
// after the gateway was configured for it).
func startCloudAt(t testing.TB, addr string, persistent bool, conf ...string) *cloud {
	t.Helper()
	_, port := hostPort(addr)
	p, _ := strconv.Atoi(port)
	c := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\n", p)
	if persistent {
		c += fmt.Sprintf("persistence true\npersistence_location %s/\n", t.TempDir())
	}
	for _, l := range conf {
		c += l + "\n"
	}
	return &cloud{Mosquitto: testutil.StartMosquitto(t, c, p), Addr: addr}
}

// Client connects a paho client to the cloud broker.
func (c *cloud) Client(t testing.TB, id string) mqtt.Client {
	t.Helper()
	return mqttClient(t, c.Addr, id, false)
}

// Mosq runs mosquitto_pub or mosquitto_sub against the cloud broker.
func (c *cloud) Mosq(t testing.TB, tool string, args ...string) string {
	t.Helper()
	return mosq(t, c.Addr, tool, args...)
}

// Subscribe runs mosquitto_sub on the cloud as the persistent client
// cloud-reader until it has n messages on topic, and sends its output
// lines.
func (c *cloud) Subscribe(ctx context.Context, topic string, n int) <-chan []string {
	host, port := hostPort(c.Addr)
	out := make(chan []string, 1)
	cmd := exec.CommandContext(ctx, "mosquitto_sub", "-h", host, "-p", port, "-t", topic, "-v", "-q", "1",
		"-C", fmt.Sprint(n), "-i", "cloud-reader", "-c") // persistent: nothing is missed while it reconnects
	go func() {
		b, _ := cmd.Output()
		out <- strings.Split(strings.TrimSpace(string(b)), "\n")
	}()
	return out
}

// cloudReader is mosquitto_sub on the cloud broker (client id
// cloud-reader, QoS 1, -v): every line it printed, "topic payload". A
// mosquitto client, not a Go one: a subscriber that falls far behind a
// fast drain has messages dropped by mosquitto itself (seen under -race
// on a loaded machine), which the test would count as lost.
type cloudReader struct {
	mu    sync.Mutex
	lines map[string]bool
}

// Reader starts a cloudReader on topics and returns once it is
// subscribed: once a probe/ message it publishes comes back.
func (c *cloud) Reader(t testing.TB, topics ...string) *cloudReader {
	t.Helper()
	host, port := hostPort(c.Addr)
	args := []string{"-h", host, "-p", port, "-i", "cloud-reader", "-q", "1", "-v", "-t", "probe/#"}
	for _, tp := range topics {
		args = append(args, "-t", tp)
	}
	cmd := exec.Command("mosquitto_sub", args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("mosquitto_sub: %v", err)
	}
	r := &cloudReader{lines: map[string]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			r.mu.Lock()
			r.lines[sc.Text()] = true
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cmd.Process.Kill(); <-done; cmd.Wait() })
	prober := c.Client(t, "cloud-prober")
	testutil.Eventually(t, 10*time.Second, "the cloud reader subscribed", func() bool {
		mustToken(t, "probe", prober.Publish("probe/x", 1, false, "p"))
		return r.Count("probe/x ") > 0
	})
	return r
}

// Count is how many distinct lines start with prefix.
func (r *cloudReader) Count(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for l := range r.lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// Payloads is the set of payloads received on anything but probe/.
func (r *cloudReader) Payloads() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]bool{}
	for l := range r.lines {
		if topic, payload, _ := strings.Cut(l, " "); !strings.HasPrefix(topic, "probe/") {
			out[payload] = true
		}
	}
	return out
}

// mqttClient connects a paho client to addr; a persistent session
// reconnects by itself. It disconnects when the test ends.
func mqttClient(t testing.TB, addr, id string, persistent bool) mqtt.Client {
	t.Helper()
	o := mqtt.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).
		SetCleanSession(!persistent).SetAutoReconnect(persistent).
		SetMaxReconnectInterval(200 * time.Millisecond).SetResumeSubs(true)
	c := mqtt.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect %s to %s: %v", id, addr, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(50) })
	return c
}

func mustToken(t testing.TB, what string, tok mqtt.Token) {
	t.Helper()
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("%s: %v", what, tok.Error())
	}
}

// seen collects the messages an MQTT client received, by topic.
type seen struct {
	mu sync.Mutex
	m  map[string]string
}

func (s *seen) handler(_ mqtt.Client, m mqtt.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[string]string)
	}
	s.m[m.Topic()] = string(m.Payload())
}

func (s *seen) has(topic string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[topic]
	return ok
}

// publishUntilPrinted starts sub (a mosquitto_sub that prints one message
// and exits) and runs pub every 300 ms until sub has printed, whose
// SUBSCRIBE cannot be seen from here; it returns what sub printed.
func publishUntilPrinted(t *testing.T, sub *exec.Cmd, pub func() *exec.Cmd, within time.Duration) string {
	t.Helper()
	out, err := sub.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(out)
		lines <- string(b)
	}()
	deadline := time.After(within)
	for {
		p := pub()
		if b, err := p.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", p.Args, err, b)
		}
		select {
		case got := <-lines:
			sub.Wait()
			return got
		case <-time.After(300 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%v printed nothing within %s", sub.Args, within)
		}
	}
}
