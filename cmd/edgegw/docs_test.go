package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgegw/edgegw/internal/config"
)

// Tests of examples in docs/ and configs/ taken as a new user takes them:
// pasted as they are, not rewritten for the test.

// TestDocReferenceConfigExamplesUncommented follows configs/edgegw.yaml's
// own instruction for its example blocks to the letter: "remove one
// leading "#" from each line (and the "bridges: []" line above)". The
// result must be a valid config. (The serial block's explanatory lines
// once started with a single "#", which left " A device that ..." behind:
// invalid YAML.)
func TestDocReferenceConfigExamplesUncommented(t *testing.T) {
	t.Setenv(config.EnvConfig, "")
	text, err := os.ReadFile(referenceConfig)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in, blocks := false, 0
	for _, line := range strings.Split(string(text), "\n") {
		switch {
		case strings.HasPrefix(line, "# ---8<---"):
			if !strings.Contains(line, `remove one leading "#" from each line`) {
				t.Fatalf("example block no longer says how to enable it: %q", line)
			}
			in = true
			blocks++
			continue
		case strings.HasPrefix(line, "# --->8---"):
			in = false
			continue
		case line == "bridges: []":
			continue
		case in:
			if !strings.HasPrefix(line, "#") {
				t.Fatalf("line in an example block without a leading #: %q", line)
			}
			line = line[1:]
		}
		out = append(out, line)
	}
	if blocks != 2 {
		t.Fatalf("found %d example blocks, want 2 (serial listener, bridge)", blocks)
	}
	code, stdout, stderr := call(t, "check-config", "--config", writeConfig(t, strings.Join(out, "\n")))
	if code != 0 {
		t.Fatalf("check-config of the uncommented reference config: exit %d\n%s", code, stderr)
	}
	for _, want := range []string{"type: serial", "device: /dev/ttyUSB0", "name: cloud", "remote_prefix: site-a/"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("effective config lacks %q:\n%s", want, stdout)
		}
	}
}

// TestBinaryReadmeFirstRun does what README.md tells a new user to do, to
// the letter: run edgegw with no config at all, then `mosquitto_sub -t '#'
// -v` and `mosquitto_pub -t a/b -m hi -q 2` with no host or port. It holds
// the README's "no config needed: a broker on 127.0.0.1:1883, metrics on
// http://127.0.0.1:18830", docs/config.md's "no file at all gives a working
// local broker on 127.0.0.1:1883", and the safe default behind both: with
// no config, edgegw listens on exactly those two loopback addresses and
// nothing else (no IPv6, no other port), and writes nothing to disk.
//
// Those are fixed ports that anything else on the machine may hold, so the
// binary runs in a network namespace of its own (unshare --net, as root,
// which the suite is), and the clients join it with nsenter.
func TestBinaryReadmeFirstRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs as root (make test does): it runs the binary in a network namespace of its own")
	}
	for _, tool := range []string{"unshare", "nsenter", "ip", "mosquitto_pub", "mosquitto_sub"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (make test-deps installs util-linux, iproute2, mosquitto-clients): %v", tool, err)
		}
	}
	cwd := t.TempDir()
	// A fresh namespace has only lo, and it is down. The shell execs the
	// binary (same pid as unshare: unshare without --fork execs too) with
	// an empty environment, so no EDGEGW_* of the caller's changes a
	// default, in an empty working directory, and with no config.
	g := newHarness(t)
	g.Command = func(bin, _ string) *exec.Cmd {
		return exec.Command("unshare", "--net", "--", "sh", "-c", `ip link set lo up && cd "$1" && exec env -i "$0"`, bin, cwd)
	}
	g.Start()
	pid := g.Pid()
	g.WaitLog(`msg="metrics listening" address=127.0.0.1:18830`)

	// Exactly two listening sockets in the namespace, both edgegw's.
	want := []string{"tcp 127.0.0.1:1883", "tcp 127.0.0.1:18830"}
	if got := listeningSockets(t, pid); !slices.Equal(got, want) {
		t.Fatalf("with no config edgegw listens on %v, want exactly %v", got, want)
	}

	// The README's two commands, verbatim, in the namespace.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inNS := func(args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(pid), "-n", "--"}, args...)...)
	}
	got := publishUntilPrinted(t, inNS("mosquitto_sub", "-t", "#", "-v", "-C", "1", "-W", "20"),
		func() *exec.Cmd { return inNS("mosquitto_pub", "-t", "a/b", "-m", "hi", "-q", "2") }, 20*time.Second)
	if strings.TrimSpace(got) != "a/b hi" {
		t.Fatalf("mosquitto_sub -t '#' -v printed %q, want \"a/b hi\"", got)
	}

	// The metrics address serves what the docs say it serves.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(_ context.Context, network, addr string) (net.Conn, error) {
			return dialInNetns(pid, network, addr)
		},
	}}
	for _, tc := range []struct{ path, want string }{
		{"/metrics", "edgegw_messages_received_total"},
		{"/healthz", "ok"},
		{"/status.json", `"schema"`},
		{"/", "<html"},
	} {
		resp, err := client.Get("http://127.0.0.1:18830" + tc.path)
		if err != nil {
			t.Fatalf("GET %s: %v", tc.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), tc.want) {
			t.Errorf("GET http://127.0.0.1:18830%s: %d, body lacks %q:\n%.300s", tc.path, resp.StatusCode, tc.want, body)
		}
	}
	client.CloseIdleConnections()

	// Without persistence.dir everything is in memory: a clean stop, and
	// not a byte written where it ran.
	g.Stop()
	if ents, err := os.ReadDir(cwd); err != nil || len(ents) != 0 {
		t.Errorf("edgegw with no config wrote into its working directory: %v %v", ents, err)
	}
}

// listeningSockets lists the TCP and UDP sockets listening or bound in
// pid's network namespace, as "tcp 127.0.0.1:1883", sorted. IPv6 sockets
// show as "tcp6 [::]:1883".
func listeningSockets(t *testing.T, pid int) []string {
	t.Helper()
	var out []string
	for _, proto := range []string{"tcp", "tcp6", "udp", "udp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, proto))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 {
				continue
			}
			// TCP: LISTEN is 0A. UDP has no listen: any bound socket counts.
			if strings.HasPrefix(proto, "tcp") && fields[3] != "0A" {
				continue
			}
			out = append(out, proto+" "+procNetAddr(t, fields[1]))
		}
		f.Close()
	}
	slices.Sort(out)
	return out
}

// procNetAddr turns /proc/net/tcp's "0100007F:075B" (little-endian words)
// into "127.0.0.1:1883".
func procNetAddr(t *testing.T, s string) string {
	t.Helper()
	hexIP, hexPort, _ := strings.Cut(s, ":")
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil {
		t.Fatalf("/proc/net address %q: %v", s, err)
	}
	ip := make(net.IP, len(hexIP)/2)
	for i := 0; i < len(hexIP)/8; i++ {
		w, err := strconv.ParseUint(hexIP[8*i:8*i+8], 16, 32)
		if err != nil {
			t.Fatalf("/proc/net address %q: %v", s, err)
		}
		for j := range 4 {
			ip[4*i+j] = byte(w >> (8 * j))
		}
	}
	return net.JoinHostPort(ip.String(), strconv.FormatUint(port, 10))
}

// dialInNetns dials addr from inside pid's network namespace: a socket
// belongs to the namespace of the thread that creates it, so the dial runs
// on a thread locked to a goroutine that joins the namespace and is never
// unlocked (the runtime then ends the thread instead of reusing it).
func dialInNetns(pid int, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			res <- result{nil, err}
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			res <- result{nil, fmt.Errorf("setns: %w", err)}
			return
		}
		c, err := net.DialTimeout(network, addr, 5*time.Second)
		res <- result{c, err}
	}()
	r := <-res
	return r.c, r.err
}
