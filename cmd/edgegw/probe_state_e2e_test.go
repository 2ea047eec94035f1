package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBinaryStateHeaderDamageLosesOnlyTheDamage: the 8-byte header of
// state.log holds no record, so damage there must cost no retained
// message or session (docs/behaviour.md, "Damage": "A damaged record (a
// flipped byte, a zeroed flash page) is skipped ... only the damaged
// records are lost"; HELPERS.md: "Lose at most the damage"). Found by a
// state probe: one flipped magic byte, or a zeroed first flash page, made
// the store take the whole file as "not a state file", move it aside and
// start with an empty state, though every record in the file was intact.
// The records behind the header now decide (gateway/store loadRecords).
func TestBinaryStateHeaderDamageLosesOnlyTheDamage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildEdgegw(t)
	const n = 60 // with 2 KiB payloads the records reach past the first 4 KiB page
	payload := make([]byte, 2048)
	for i := range payload {
		payload[i] = 'p'
	}
	for _, c := range []struct {
		name   string
		damage func(b []byte) (lostAtMost int)
	}{
		{"magic byte flipped", func(b []byte) int { b[0] ^= 0xff; return 0 }},
		// A zeroed 4 KiB flash page costs the records it touches: with
		// ~2.1 KiB per record, at most 2 of them (plus the header).
		{"first page zeroed", func(b []byte) int { clear(b[:4096]); return 2 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newPersistEnv(t, bin, "batch")
			e.start()
			for i := range n {
				e.run("mosquitto_pub", "-q", "1", "-r", "-t", fmt.Sprintf("keep/%d", i), "-m", string(payload))
			}
			e.stop(syscall.SIGTERM)
			path := filepath.Join(e.dir, "state", "state.log")
			b, err := os.ReadFile(path)
			if err != nil || len(b) < 3*4096 {
				t.Fatalf("state file: %v, %d bytes", err, len(b))
			}
			lost := c.damage(b)
			os.WriteFile(path, b, 0o600)
			e.start()
			got := e.retainedNow("keep/+")
			if len(got) < n-lost {
				t.Fatalf("retained after damage to the file's header: %d of %d, want at least %d (the header holds no record)",
					len(got), n, n-lost)
			}
		})
	}
}

// TestBinarySpoolVersionByteZeroLosesOnlyTheDamage: a segment header whose
// version byte reads 0 (one flipped bit of version 2; no edgegw ever wrote
// version 0, so it is damage, not a newer format) costs no message: the
// header holds none (docs/bridge.md, "Damaged or full storage": "Damage
// costs the damaged messages and no more; the spool repairs what it finds
// when it opens, logs it and carries on"; a damaged magic is rewritten).
// Found by a state probe: the spool refused to open ("unknown format
// version 0"), the bridge failed for good, none of the 20 spooled
// messages went upstream and every new one for it was refused. Only a
// higher version with no readable record behind it is refused now
// (bridge/spool loadSegment, parseAckLog).
func TestBinarySpoolVersionByteZeroLosesOnlyTheDamage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildEdgegw(t)
	local, cloud := freePort(t), freePort(t)
	lhost, lport, _ := net.SplitHostPort(local)
	chost, cport, _ := net.SplitHostPort(cloud)
	state := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "edgegw.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
listeners:
  - {name: lan, type: tcp, address: "%s"}
metrics: {address: ""}
persistence: {dir: "%s", sync: batch}
bridges:
  - name: cloud
    addresses: ["tcp://%s"]
    client_id: edge-probe
    reconnect_min: 100ms
    reconnect_max: 500ms
    topics:
      - {pattern: "sensors/#", direction: out, qos: 1, remote_prefix: "site/"}
`, local, state, cloud)), 0o600)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The cloud is down: 20 messages are spooled (acknowledged), then a clean stop.
	g := startEdgegw(t, bin, "--config", cfg)
	waitListening(t, local)
	var lines strings.Builder
	for i := range 20 {
		fmt.Fprintf(&lines, "m%02d\n", i)
	}
	pub := exec.CommandContext(ctx, "mosquitto_pub", "-h", lhost, "-p", lport, "-q", "1", "-t", "sensors/t", "-l")
	pub.Stdin = strings.NewReader(lines.String())
	if out, err := pub.CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_pub: %v %s", err, out)
	}
	g.cmd.Process.Signal(syscall.SIGTERM)
	<-g.done
	g.done <- nil

	segs, _ := filepath.Glob(filepath.Join(state, "bridges", "cloud", "*.seg"))
	if len(segs) != 1 {
		t.Fatalf("segments: %v", segs)
	}
	b, err := os.ReadFile(segs[0])
	if err != nil || len(b) < 16 || b[4] == 0 {
		t.Fatalf("segment %s: %v, %d bytes", segs[0], err, len(b))
	}
	b[4] = 0 // the version byte; every record is intact
	os.WriteFile(segs[0], b, 0o600)

	// The cloud comes up with a persistent reader registered, then edgegw.
	startMosquitto(t, cloud, t.TempDir())
	reg := exec.CommandContext(ctx, "mosquitto_sub", "-h", chost, "-p", cport, "-t", "site/#", "-q", "1",
		"-i", "cloud-reader", "-c", "-E")
	if out, err := reg.CombinedOutput(); err != nil {
		t.Fatalf("register the cloud reader: %v %s", err, out)
	}
	waitCtx, waitCancel := context.WithTimeout(ctx, 20*time.Second)
	defer waitCancel()
	rest := subscribeUpstream(waitCtx, t, cloud, "site/#", 20)
	g = startEdgegw(t, bin, "--config", cfg)
	waitListening(t, local)
	got := <-rest
	seen := map[string]bool{}
	for _, l := range got {
		seen[strings.TrimPrefix(l, "site/sensors/t ")] = true
	}
	missing := 0
	for i := range 20 {
		if !seen[fmt.Sprintf("m%02d", i)] {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d of 20 spooled messages did not reach the cloud in 20 s after a damaged version byte in the segment header (every record intact); upstream got %q", missing, got)
	}
}
