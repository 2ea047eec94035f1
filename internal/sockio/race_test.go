//go:build race

package sockio

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The race detector sees the kernel's side of sockio's calls (race.go),
// as it did while they went through syscall.Read and conn.Write: a
// goroutine writing into a buffer that a raw read fills, or that a Write
// sends, is reported. Each racy call runs in a child process: a reported
// race fails the test binary that has it.
func TestRawReadSeenByRaceDetector(t *testing.T) {
	seenByRaceDetector(t, "TestRawReadSeenByRaceDetector", "sockio.Read",
		func(t *testing.T, raw syscall.RawConn, peer interface{ Write([]byte) (int, error) }, buf []byte) error {
			peer.Write([]byte("x"))
			_, err := Read(raw, buf, true)
			return err
		})
}

func TestRawWriteSeenByRaceDetector(t *testing.T) {
	seenByRaceDetector(t, "TestRawWriteSeenByRaceDetector", "sockio.Write",
		func(t *testing.T, raw syscall.RawConn, _ interface{ Write([]byte) (int, error) }, buf []byte) error {
			_, err := Write(raw, buf)
			return err
		})
}

// seenByRaceDetector runs call, unordered with a goroutine writing into
// buf, in a child process, and wants the race reported in fn.
func seenByRaceDetector(t *testing.T, test, fn string,
	call func(t *testing.T, raw syscall.RawConn, peer interface{ Write([]byte) (int, error) }, buf []byte) error) {
	if os.Getenv("EDGEGW_RACY_SOCKIO") == test {
		_, raw, peer := socketPair(t)
		buf := make([]byte, 8)
		done := make(chan struct{})
		go func() { buf[0] = 'y'; close(done) }()
		time.Sleep(20 * time.Millisecond) // unordered with the goroutine on purpose: no sync between them
		if err := call(t, raw, peer, buf); err != nil {
			t.Fatal(err)
		}
		<-done
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), "EDGEGW_RACY_SOCKIO="+test)
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "WARNING: DATA RACE") || !strings.Contains(string(out), fn) {
		t.Fatalf("the race detector did not see %s touch a buffer another goroutine wrote:\n%s", fn, out)
	}
}
