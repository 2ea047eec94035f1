package testutil

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// MosquittoBin is where Debian's mosquitto package installs the broker
// (scripts/install-test-deps.sh installs it).
const MosquittoBin = "/usr/sbin/mosquitto"

// Mosquitto is Debian's broker run from a config file for one test. Start
// and the two ways to end it (Kill, Stop) may be called again to restart it
// on the same ports; t's cleanup kills whatever still runs.
type Mosquitto struct {
	t     testing.TB
	conf  string
	ports []int
	cmd   *exec.Cmd
	done  chan struct{}
}

// StartMosquitto writes conf to a file in a temporary directory, starts
// mosquitto with it and waits until each of ports (the listeners conf
// declares on 127.0.0.1) accepts connections. A missing mosquitto fails the
// test: tests never skip because a tool is missing.
func StartMosquitto(t testing.TB, conf string, ports ...int) *Mosquitto {
	t.Helper()
	if _, err := os.Stat(MosquittoBin); err != nil {
		t.Fatalf("mosquitto not installed (scripts/install-test-deps.sh installs it): %v", err)
	}
	m := &Mosquitto{t: t, ports: ports, conf: filepath.Join(t.TempDir(), "mosquitto.conf")}
	if err := os.WriteFile(m.conf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	m.Start()
	t.Cleanup(m.Kill)
	return m
}

// Start starts mosquitto (again) and waits for its ports. Something else
// answering on a port fails the test: mosquitto exits when it cannot bind,
// and a stray listener would be tested instead.
func (m *Mosquitto) Start() {
	m.t.Helper()
	m.cmd = exec.Command(MosquittoBin, "-c", m.conf)
	if os.Getenv("EDGEGW_TEST_DEBUG") != "" {
		m.cmd.Stderr = os.Stderr // its log, for debugging a test
	}
	if err := m.cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	m.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(m.cmd, m.done)
	for _, port := range m.ports {
		addr := "127.0.0.1:" + strconv.Itoa(port)
		Eventually(m.t, 10*time.Second, "mosquitto listening on "+addr, func() bool {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				return false
			}
			c.Close()
			return true
		})
		if out, err := exec.Command("ss", "-ltnpH", "sport = :"+strconv.Itoa(port)).Output(); err == nil &&
			!strings.Contains(string(out), fmt.Sprintf("pid=%d,", m.cmd.Process.Pid)) {
			m.t.Fatalf("port %d is not mosquitto's (pid %d): %s", port, m.cmd.Process.Pid, out)
		}
	}
}

// Kill ends mosquitto with SIGKILL: nothing is flushed, like a crash.
func (m *Mosquitto) Kill() { m.end(syscall.SIGKILL) }

// Stop ends mosquitto with SIGTERM and waits: it saves its persistence
// file, so persistent sessions survive into the next Start.
func (m *Mosquitto) Stop() { m.end(syscall.SIGTERM) }

func (m *Mosquitto) end(sig syscall.Signal) {
	if m.cmd == nil {
		return
	}
	m.cmd.Process.Signal(sig)
	<-m.done
	m.cmd = nil
}
