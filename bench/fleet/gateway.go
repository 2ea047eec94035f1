package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// logLine is one line a gateway wrote, stamped when this program read it
// (the same clock as the node kill it is compared with).
type logLine struct {
	at   time.Time
	text string
}

// gateway is one edgegw process (and its restarts) run from the shared
// config file with its own environment.
type gateway struct {
	name       string // names its directory and log
	id         string // FLEET_GATEWAY_ID; the client id upstream is "gw-" + id
	mqttPort   int
	statusPort int
	bin, conf  string
	env        []string
	logPath    string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when cmd has exited and its log is read
	lines  []logLine
	starts []time.Time
}

func newGateway(bin, conf, dir, name, id string, mqttPort, statusPort int, extraEnv []string) *gateway {
	gdir := filepath.Join(dir, name)
	env := append(os.Environ(),
		"FLEET_GATEWAY_ID="+id,
		fmt.Sprintf("FLEET_MQTT_PORT=%d", mqttPort),
		fmt.Sprintf("FLEET_STATUS_PORT=%d", statusPort),
		"FLEET_DIR="+gdir,
	)
	env = append(env, extraEnv...)
	return &gateway{
		name: name, id: id, mqttPort: mqttPort, statusPort: statusPort,
		bin: bin, conf: conf, env: env,
		logPath: filepath.Join(dir, name+".log"),
	}
}

func (g *gateway) clientID() string { return "gw-" + g.id }

// start runs the process; its stderr (the log) is read line by line.
func (g *gateway) start() error {
	cmd := exec.Command(g.bin, "--config", g.conf)
	cmd.Env = g.env
	// The gateway dies with this program even if it is killed itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	cmd.Stdout = nil
	logf, err := os.OpenFile(g.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("gateway %s: %w", g.id, err)
	}
	done := make(chan struct{})
	g.mu.Lock()
	g.cmd = cmd
	g.done = done
	g.starts = append(g.starts, time.Now())
	g.mu.Unlock()
	go func() {
		defer close(done)
		defer logf.Close()
		g.read(stderr, logf)
		cmd.Wait()
	}()
	return nil
}

func (g *gateway) read(r io.Reader, logf io.Writer) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := logLine{at: time.Now(), text: sc.Text()}
		fmt.Fprintf(logf, "%s %s\n", l.at.Format("15:04:05.000"), l.text)
		g.mu.Lock()
		g.lines = append(g.lines, l)
		g.mu.Unlock()
	}
}

// signal sends sig and waits (up to 20 s) for the process to exit.
func (g *gateway) signal(sig syscall.Signal) error {
	g.mu.Lock()
	cmd, done := g.cmd, g.done
	g.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return nil // already gone
	}
	select {
	case <-done:
		return nil
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("gateway %s did not exit within 20s of %v", g.id, sig)
	}
}

var (
	addrRe   = regexp.MustCompile(`address=(\S+)`)
	reasonRe = regexp.MustCompile(`reason=("[^"]*"|\S+)`)
)

// lineAt is the text of the first line read at t.
func (g *gateway) lineAt(t time.Time) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, l := range g.lines {
		if l.at.Equal(t) {
			return l.text
		}
	}
	return ""
}

// connectedSince returns the first "uplink connected" line at or after t,
// and the address it names.
func (g *gateway) connectedSince(t time.Time) (time.Time, string, bool) {
	return g.firstSince(t, `msg="uplink connected"`)
}

func (g *gateway) firstSince(t time.Time, needle string) (time.Time, string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, l := range g.lines {
		if !l.at.Before(t) && strings.Contains(l.text, needle) {
			addr := ""
			if m := addrRe.FindStringSubmatch(l.text); m != nil {
				addr = m[1]
			}
			return l.at, addr, true
		}
	}
	return time.Time{}, "", false
}

// countSince counts lines at or after t that contain needle.
func (g *gateway) countSince(t time.Time, needle string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, l := range g.lines {
		if !l.at.Before(t) && strings.Contains(l.text, needle) {
			n++
		}
	}
	return n
}

// lastAddress is the address of the latest "uplink connected" line.
func (g *gateway) lastAddress() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := len(g.lines) - 1; i >= 0; i-- {
		if strings.Contains(g.lines[i].text, `msg="uplink connected"`) {
			if m := addrRe.FindStringSubmatch(g.lines[i].text); m != nil {
				return m[1]
			}
		}
	}
	return ""
}

// bridgeStatus is the part of /status.json this program reads.
type bridgeStatus struct {
	Name            string `json:"name"`
	State           string `json:"state"`
	Address         string `json:"address"`
	Inflight        int64  `json:"inflight"`
	BacklogMessages int64  `json:"backlog_messages"`
	Sent            int64  `json:"sent"`
	Acked           int64  `json:"acked"`
	Connects        int64  `json:"connects"`
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

func (g *gateway) status(ctx context.Context) (bridgeStatus, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/status.json", g.statusPort), nil)
	if err != nil {
		return bridgeStatus{}, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return bridgeStatus{}, err
	}
	defer resp.Body.Close()
	var doc struct {
		Bridges []bridgeStatus `json:"bridges"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return bridgeStatus{}, fmt.Errorf("gateway %s status.json: %w", g.id, err)
	}
	if len(doc.Bridges) != 1 {
		return bridgeStatus{}, fmt.Errorf("gateway %s status.json: %d bridges", g.id, len(doc.Bridges))
	}
	return doc.Bridges[0], nil
}

func execOutput(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, args...).Output()
	return string(out), err
}
