//go:build race

package sockio

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestRawReadSeenByRaceDetector: a goroutine writing into a buffer that a
// raw read fills is reported by the race detector, as it was while reads
// went through syscall.Read (race.go). The racy read runs in a
// child process: a reported race fails the test binary that has it.
func TestRawReadSeenByRaceDetector(t *testing.T) {
	if os.Getenv("EDGEGW_RACY_RAWREAD") == "1" {
		_, raw, peer := socketPair(t)
		buf := make([]byte, 8)
		peer.Write([]byte("x"))
		done := make(chan struct{})
		go func() { buf[0] = 'y'; close(done) }()
		time.Sleep(20 * time.Millisecond) // unordered with the goroutine on purpose: no sync between them
		if _, err := Read(raw, buf, true); err != nil {
			t.Fatal(err)
		}
		<-done
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRawReadSeenByRaceDetector$", "-test.count=1")
	cmd.Env = append(os.Environ(), "EDGEGW_RACY_RAWREAD=1")
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "WARNING: DATA RACE") || !strings.Contains(string(out), "sockio.Read") {
		t.Fatalf("the race detector did not see a raw read's write into a buffer another goroutine wrote:\n%s", out)
	}
}
