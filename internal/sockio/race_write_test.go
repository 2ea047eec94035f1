//go:build race

package sockio

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestRawWriteSeenByRaceDetector: a goroutine writing into a buffer that
// Write sends is reported by the race detector (race.go: a write reads
// its buffer), as it was while writes went through conn.Write.
func TestRawWriteSeenByRaceDetector(t *testing.T) {
	if os.Getenv("EDGEGW_RACY_RAWWRITE") == "1" {
		_, raw, _ := socketPair(t)
		buf := make([]byte, 8)
		done := make(chan struct{})
		go func() { buf[0] = 'y'; close(done) }()
		time.Sleep(20 * time.Millisecond) // unordered with the goroutine on purpose: no sync between them
		if _, err := Write(raw, buf); err != nil {
			t.Fatal(err)
		}
		<-done
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRawWriteSeenByRaceDetector$", "-test.count=1")
	cmd.Env = append(os.Environ(), "EDGEGW_RACY_RAWWRITE=1")
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "WARNING: DATA RACE") || !strings.Contains(string(out), "sockio.Write") {
		t.Fatalf("the race detector did not see Write read a buffer another goroutine wrote:\n%s", out)
	}
}
