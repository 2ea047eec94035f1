package main

// The two brokers under attack, configured alike: 127.0.0.1 on a free
// port, anonymous off, the same users in each one's password-file format,
// the same ACL text, 1 MiB maximum packet size, no persistence. Everything
// else is each broker's default, as installed.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// users are the accounts both brokers know. ops is not in the issue: it is
// the one user allowed to write shared/secret/#, so a delivery check for
// alice's deny rule has a legitimate publisher.
var users = map[string]string{
	"alice": "alice-pw",
	"bob":   "bob-pw",
	"ops":   "ops-pw",
	"carol": "carol-pw",
}

// aclText is the ACL of issue 13 (plus ops), in the syntax both brokers read.
const aclText = `# hostile suite ACL (issue 13)
pattern readwrite clients/%c/#

user alice
topic readwrite shared/#
topic deny shared/secret/#
topic readwrite alice/#

user bob
topic readwrite bob/#

user ops
topic readwrite shared/#
`

const maxPacketSize = 1 << 20

// brokerSpec says how to run one broker kind.
type brokerSpec struct {
	name string
	bin  string
	dir  string // holds its password file, ACL and configs
}

// prepare writes the password file and the ACL into dir.
func (s *brokerSpec) prepare(ctx context.Context) error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return err
	}
	// mosquitto started as root drops to user mosquitto: its files must be
	// readable by others (a throwaway directory on a test machine).
	if err := os.Chmod(s.dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.dir, "acl"), []byte(aclText), 0o644); err != nil {
		return err
	}
	pw := filepath.Join(s.dir, "passwd")
	for _, u := range []string{"alice", "bob", "ops", "carol"} {
		var cmd *exec.Cmd
		switch s.name {
		case "edgegw":
			cmd = exec.CommandContext(ctx, s.bin, "passwd", pw, u)
			cmd.Stdin = strings.NewReader(users[u] + "\n")
		case "mosquitto":
			args := []string{"-b", pw, u, users[u]}
			if _, err := os.Stat(pw); err != nil {
				args = append([]string{"-c"}, args...)
			}
			cmd = exec.CommandContext(ctx, "mosquitto_passwd", args...)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s password for %s: %w: %s", s.name, u, err, out)
		}
	}
	return os.Chmod(pw, 0o644)
}

func (s *brokerSpec) config(port int) (path string, err error) {
	pw, acl := filepath.Join(s.dir, "passwd"), filepath.Join(s.dir, "acl")
	var text string
	switch s.name {
	case "edgegw":
		path = filepath.Join(s.dir, "edgegw.yaml")
		text = fmt.Sprintf(`log:
  level: warn
listeners:
  - name: hostile
    type: tcp
    address: "127.0.0.1:%d"
limits:
  max_packet_size: %d
auth:
  allow_anonymous: false
  password_file: %q
  acl_file: %q
persistence:
  dir: ""
metrics:
  address: ""
`, port, maxPacketSize, pw, acl)
	case "mosquitto":
		path = filepath.Join(s.dir, "mosquitto.conf")
		text = fmt.Sprintf(`listener %d 127.0.0.1
allow_anonymous false
password_file %s
acl_file %s
persistence false
max_packet_size %d
max_connections -1
set_tcp_nodelay true
log_dest stderr
log_type error
log_type warning
`, port, pw, acl, maxPacketSize)
	default:
		return "", fmt.Errorf("unknown broker %q", s.name)
	}
	return path, os.WriteFile(path, []byte(text), 0o644)
}

// broker is one running broker process.
type broker struct {
	name string
	addr string
	pid  int
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	log  *os.File
}

// freePort asks the kernel for a loopback port nobody uses now; the
// broker's bind is the real test (start retries on a clash).
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs a fresh broker and returns once it accepts connections.
func (s *brokerSpec) start(ctx context.Context) (*broker, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		cfg, err := s.config(port)
		if err != nil {
			return nil, err
		}
		logf, err := os.OpenFile(filepath.Join(s.dir, s.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		var cmd *exec.Cmd
		if s.name == "edgegw" {
			cmd = exec.Command(s.bin, "--config", cfg)
		} else {
			cmd = exec.Command(s.bin, "-c", cfg)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			logf.Close()
			return nil, fmt.Errorf("start %s: %w", s.name, err)
		}
		b := &broker{name: s.name, addr: fmt.Sprintf("127.0.0.1:%d", port), pid: cmd.Process.Pid, cmd: cmd, done: make(chan struct{}), log: logf}
		go func() { cmd.Wait(); close(b.done) }()
		if lastErr = b.waitReady(ctx, 5*time.Second); lastErr == nil {
			return b, nil
		}
		b.stop()
	}
	return nil, fmt.Errorf("%s did not start (log in %s): %w", s.name, s.dir, lastErr)
}

func (b *broker) alive() bool {
	select {
	case <-b.done:
		return false
	default:
		return true
	}
}

func (b *broker) waitReady(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		if !b.alive() {
			return errors.New("exited")
		}
		c, err := net.DialTimeout("tcp", b.addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("port %s not open after %v: %w", b.addr, within, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM, then SIGKILL after 5 s.
func (b *broker) stop() {
	b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(5 * time.Second):
		b.cmd.Process.Kill()
		<-b.done
	}
	b.log.Close()
}
