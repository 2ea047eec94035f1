package framing

import (
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
)

// docVectors are the worked examples of docs/serial-framing.md. The test
// checks that the document shows exactly these bytes, so it cannot drift.
var docVectors = []struct {
	name   string
	packet string // hex, space separated
}{
	{
		name:   "CONNECT 3.1.1, client id s1, keepalive 60, clean session",
		packet: "10 0e 00 04 4d 51 54 54 04 02 00 3c 00 02 73 31",
	},
	{
		name:   "PUBLISH QoS 0 sensors/s1/temp payload 21.5",
		packet: "30 15 00 0f 73 65 6e 73 6f 72 73 2f 73 31 2f 74 65 6d 70 32 31 2e 35",
	},
	{
		name:   "PINGREQ",
		packet: "c0 00",
	},
}

func spaced(b []byte) string {
	h := hex.EncodeToString(b)
	var sb strings.Builder
	for i := 0; i < len(h); i += 2 {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(h[i : i+2])
	}
	return sb.String()
}

func TestDocVectors(t *testing.T) {
	doc, err := os.ReadFile("../../docs/serial-framing.md")
	if err != nil {
		t.Fatalf("read spec: %v", err)
	}
	// Line breaks inside a hex block are not significant.
	flat := strings.Join(strings.Fields(string(doc)), " ")
	if want := fmt.Sprintf("largest packet that always fits is %d bytes", MaxPacketLen(DefaultMaxFrame)); !strings.Contains(flat, want) {
		t.Errorf("docs/serial-framing.md does not contain %q", want)
	}
	for _, v := range docVectors {
		pkt := unhex(t, v.packet)
		crc := CRC16(pkt)
		frame := AppendFrame(nil, pkt)
		t.Logf("%s\n  packet %s\n  crc    %04x\n  frame  %s", v.name, spaced(pkt), crc, spaced(frame))
		block := fmt.Sprintf("packet %s crc 0x%04X frame %s", spaced(pkt), crc, spaced(frame))
		if !strings.Contains(flat, block) {
			t.Errorf("%s: docs/serial-framing.md does not contain the block\n%s", v.name, block)
		}
		got := readAll(t, NewReader(strings.NewReader(string(frame)), 0))
		if len(got) != 1 || spaced(got[0]) != spaced(pkt) {
			t.Errorf("%s: frame does not read back", v.name)
		}
	}
}
