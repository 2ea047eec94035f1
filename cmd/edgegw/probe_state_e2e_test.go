package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestProbeStateHeaderDamageLosesOnlyTheDamage: the 8-byte header of
// state.log holds no record, so damage there must cost no retained
// message or session (docs/behaviour.md, "Damage": "A damaged record (a
// flipped byte, a zeroed flash page) is skipped ... only the damaged
// records are lost"; HELPERS.md: "Lose at most the damage"). Found by a
// state probe: one flipped magic byte, or a zeroed first flash page, makes
// the store take the whole file as "not a state file", move it aside and
// start with an empty state: every retained message and session is gone
// though every record in the file is intact.
func TestProbeStateHeaderDamageLosesOnlyTheDamage(t *testing.T) {
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
