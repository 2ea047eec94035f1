package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/edgegw/edgegw/internal/testutil"
)

// Tests of serial sensors through the binary: the sensor simulator it
// ships, and the framing code docs/serial-framing.md gives firmware
// authors. The ptys stand in for the serial ports.

// ptyWire is two pseudo-terminals whose masters are copied into each other:
// a null-modem cable between two slave paths.
func ptyWire(t *testing.T) (a, b string) {
	t.Helper()
	ma, sa := testutil.Pty(t)
	mb, sb := testutil.Pty(t)
	for _, s := range []*os.File{sa, sb} { // raw: no echo, no line discipline
		if _, err := exec.Command("stty", "-F", s.Name(), "raw", "-echo").CombinedOutput(); err != nil {
			t.Fatalf("stty raw %s: %v", s.Name(), err)
		}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); io.Copy(mb, ma) }() // ends when the masters close
	go func() { defer wg.Done(); io.Copy(ma, mb) }()
	t.Cleanup(func() {
		ma.Close()
		mb.Close()
		wg.Wait()
		sa.Close() // held open so the masters never read EIO between opens
		sb.Close()
	})
	return sa.Name(), sb.Name()
}

// openPty opens a pty whose slave is reachable at link; the returned
// master is non-blocking (Close interrupts a Read), and is drained by a
// goroutine that ends when it is closed.
func openPty(t *testing.T, link string) *os.File {
	t.Helper()
	m, pts := testutil.Pty(t)
	if err := os.Symlink(pts.Name(), link); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { // the gateway's CONNACK and whatever follows
		defer close(done)
		io.Copy(io.Discard, m)
	}()
	t.Cleanup(func() {
		m.Close()
		<-done
		pts.Close()
	})
	return m
}

// TestSensorSubcommand: `edgegw sensor` of the real binary publishes its
// readings through the gateway's serial listener (issue 15, point 5: the
// simulator ships in the binary the .deb installs).
func TestSensorSubcommand(t *testing.T) {
	gwTTY, sensorTTY := ptyWire(t)
	g := newHarness(t).NoMetrics()
	g.Listener(listenerConf{Name: "uart", Type: "serial", Device: gwTTY})
	g.Start()
	g.WaitLog(gwTTY)

	got := make(chan string, 10)
	mustToken(t, "subscribe", g.Client("watch", false).Subscribe("sensors/#", 1, func(_ mqtt.Client, m mqtt.Message) {
		got <- m.Topic() + " " + string(m.Payload())
	}))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, edgegwBinary(t), "sensor", "--device", sensorTTY, "--id", "s7",
		"--count", "3", "--rate", "20/s", "--qos", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("edgegw sensor: %v\n%s", err, out)
	}
	for i := 1; i <= 3; i++ {
		select {
		case m := <-got:
			if !strings.HasPrefix(m, "sensors/s7/temp ") || !strings.Contains(m, fmt.Sprintf(`"seq":%d`, i)) {
				t.Fatalf("reading %d: %q", i, m)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("reading %d did not arrive; sensor output:\n%s", i, out)
		}
	}
}

// docFramingMain drives the C functions of docs/serial-framing.md as a
// firmware would: it checks the CRC's check value, then writes to stdout
// the leading 0x00 the page recommends and three frames, a 3.1.1 CONNECT
// (client id "c1") and two retained QoS 0 PUBLISHes, "from-c" to doc/c and
// 600 digits to doc/long (longer than 254 bytes, so that COBS code 0xFF
// is used), each packet || CRC16 big-endian, COBS-encoded by cobs_encode,
// then 0x00.
const docFramingMain = `
#include <stdio.h>
#include <string.h>

static void frame(const uint8_t *pkt, size_t n)
{
    uint8_t buf[1024], enc[1100];
    uint16_t crc = crc16(pkt, n);
    memcpy(buf, pkt, n);
    buf[n] = (uint8_t)(crc >> 8);
    buf[n + 1] = (uint8_t)crc;
    size_t m = cobs_encode(buf, n + 2, enc);
    fwrite(enc, 1, m, stdout);
    fputc(0, stdout);
}

/* A retained QoS 0 PUBLISH; remaining length < 16384. */
static void publish(const char *topic, const char *payload)
{
    uint8_t p[1024];
    size_t t = strlen(topic), n = strlen(payload), rl = 2 + t + n, i = 0;
    p[i++] = 0x31;
    if (rl < 128) {
        p[i++] = (uint8_t)rl;
    } else {
        p[i++] = (uint8_t)(0x80 | (rl & 0x7f));
        p[i++] = (uint8_t)(rl >> 7);
    }
    p[i++] = 0;
    p[i++] = (uint8_t)t;
    memcpy(p + i, topic, t);
    memcpy(p + i + t, payload, n);
    frame(p, i + t + n);
}

int main(void)
{
    if (crc16((const uint8_t *)"123456789", 9) != 0x29B1)
        return 1;
    static const uint8_t connect[] = {0x10, 0x0e, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x04, 0x02,
                                      0x00, 0x3c, 0x00, 0x02, 'c', '1'};
    char long_payload[601];
    for (int i = 0; i < 600; i++)
        long_payload[i] = (char)('0' + i % 10);
    long_payload[600] = 0;
    fputc(0, stdout);
    frame(connect, sizeof connect);
    publish("doc/c", "from-c");
    publish("doc/long", long_payload);
    return 0;
}
`

// TestBinaryDocSerialFramingC compiles the C code of
// docs/serial-framing.md (crc16_update, crc16, cobs_encode) as printed,
// and has it frame a CONNECT and two PUBLISHes that the binary's serial
// listener, on a pty, must take: a subscriber gets both messages. The page's
// byte vectors are checked by devices/framing TestDocVectors; this checks
// the code a firmware author copies.
func TestBinaryDocSerialFramingC(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Fatalf("no C compiler (make test installs gcc): %v", err)
	}
	doc, err := os.ReadFile("../../docs/serial-framing.md")
	if err != nil {
		t.Fatal(err)
	}
	var code []string
	for _, part := range strings.Split(string(doc), "```c\n")[1:] {
		end := strings.Index(part, "```")
		if end < 0 {
			t.Fatal("docs/serial-framing.md: unterminated C block")
		}
		code = append(code, part[:end])
	}
	if len(code) != 2 {
		t.Fatalf("docs/serial-framing.md: %d C blocks, want 2 (CRC, COBS)", len(code))
	}
	dir := t.TempDir()
	src, exe := filepath.Join(dir, "framing.c"), filepath.Join(dir, "framing")
	os.WriteFile(src, []byte(strings.Join(code, "\n")+docFramingMain), 0o600)
	if out, err := exec.Command(cc, "-std=c99", "-Wall", "-Werror", "-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("the C code of docs/serial-framing.md does not compile: %v\n%s", err, out)
	}
	frames, err := exec.Command(exe).Output()
	if err != nil {
		t.Fatalf("the C code of docs/serial-framing.md: %v (CRC check value not 0x29B1?)", err)
	}

	link := filepath.Join(dir, "tty")
	m := openPty(t, link)
	g := newHarness(t).NoMetrics()
	g.Listener(listenerConf{Name: "uart", Type: "serial", Device: link})
	g.Start()
	g.WaitLog("device open")
	if _, err := m.Write(frames); err != nil {
		t.Fatal(err)
	}
	out := g.Mosq("mosquitto_sub", "-t", "doc/c", "-t", "doc/long", "-v", "-C", "2", "-W", "10")
	want := "doc/c from-c\ndoc/long " + strings.Repeat("0123456789", 60)
	if got := strings.TrimSpace(out); got != want {
		t.Fatalf("subscriber to doc/c and doc/long: %q, want %q (frames % x)", got, want, frames)
	}
}
