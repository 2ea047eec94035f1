package main

import (
	"net"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
)

// The harness's older calls, kept for a binary test written against them
// on another branch (the bridge's inbound QoS 2 test): remove this file
// once that test uses newHarness.

// gatewayProc is one run of the binary: cmd, done (its exit, sent once)
// and logs.
type gatewayProc struct {
	cmd  *exec.Cmd
	done chan error
	p    *gwProcess
}

func (g *gatewayProc) logs() string { return g.p.logs() }

func buildEdgegw(t *testing.T) string { return edgegwBinary(t) }

func startEdgegw(t *testing.T, bin string, args ...string) *gatewayProc {
	t.Helper()
	p := startProcess(t, exec.Command(bin, args...), nil)
	g := &gatewayProc{cmd: p.cmd, done: make(chan error, 1), p: p}
	go func() { <-p.done; g.done <- p.err }() // ends with the process
	t.Cleanup(func() {
		p.end(syscall.SIGKILL)
		if t.Failed() {
			t.Logf("edgegw log:\n%s", p.logs())
		}
	})
	return g
}

// waitListening waits (at most 10 s) until addr accepts a TCP connection.
func waitListening(t *testing.T, addr string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "listener on "+addr, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}
