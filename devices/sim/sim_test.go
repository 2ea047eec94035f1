package sim

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/edgegw/edgegw/devices/framing"
	"github.com/edgegw/edgegw/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newPty returns a pollable pty master and the slave path; the slave stays
// open until cleanup so the master never reads EIO between opens.
func newPty(t *testing.T) (*os.File, string) {
	t.Helper()
	m, s := testutil.Pty(t)
	return m, s.Name()
}

// fakePeer plays the gateway on the pty master: it decodes frames with
// framing.Reader and hands every good packet to the test goroutine.
type fakePeer struct {
	fr      *framing.Reader
	fw      *framing.Writer
	wmu     sync.Mutex
	packets chan []byte
	done    chan struct{}
}

func startPeer(t *testing.T, master *os.File) *fakePeer {
	p := &fakePeer{
		fr:      framing.NewReader(master, 0),
		fw:      framing.NewWriter(master, 0),
		packets: make(chan []byte, 64),
		done:    make(chan struct{}),
	}
	go func() { // owned by the test: ends when master is closed
		defer close(p.done)
		defer close(p.packets)
		for {
			pkt, err := p.fr.ReadFrame()
			if err != nil {
				return
			}
			p.packets <- append([]byte(nil), pkt...)
		}
	}()
	t.Cleanup(func() {
		master.Close()
		<-p.done
	})
	return p
}

func (p *fakePeer) send(t *testing.T, pkt []byte) {
	t.Helper()
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if err := p.fw.WriteFrame(pkt); err != nil {
		t.Fatalf("peer write: %v", err)
	}
}

func (p *fakePeer) next(t *testing.T, wantType byte) []byte {
	t.Helper()
	select {
	case pkt, ok := <-p.packets:
		if !ok {
			t.Fatalf("link closed while waiting for packet type %d", wantType)
		}
		if pkt[0]>>4 != wantType {
			t.Fatalf("got packet type %d (%x), want %d", pkt[0]>>4, pkt, wantType)
		}
		return pkt
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for packet type %d", wantType)
	}
	return nil
}

// body returns the variable header and payload after the fixed header.
func body(pkt []byte) []byte {
	i := 1
	for pkt[i]&0x80 != 0 {
		i++
	}
	return pkt[i+1:]
}

func str(b []byte) (string, []byte) {
	n := binary.BigEndian.Uint16(b)
	return string(b[2 : 2+n]), b[2+n:]
}

func TestSimulatorOverPty(t *testing.T) {
	for _, qos := range []byte{0, 1} {
		t.Run("qos"+string('0'+qos), func(t *testing.T) {
			master, slave := newPty(t)
			peer := startPeer(t, master)
			var out testutil.LogBuffer
			cfg := Config{
				Device:   slave,
				ClientID: "s1",
				Topic:    "sensors/{id}/temp",
				Interval: 5 * time.Millisecond,
				Count:    3,
				QoS:      qos,
				Sub:      "cmd/{id}/#",
				Out:      &out,
			}
			errc := make(chan error, 1)
			go func() { errc <- Run(context.Background(), cfg) }()

			// CONNECT, MQTT 3.1.1, clean session, client id s1.
			b := body(peer.next(t, 1))
			name, rest := str(b)
			if name != "MQTT" || rest[0] != 4 || rest[1]&0x02 == 0 {
				t.Fatalf("bad CONNECT header %x", b)
			}
			if id, _ := str(rest[4:]); id != "s1" {
				t.Fatalf("client id %q", id)
			}
			peer.send(t, []byte{0x20, 0x02, 0x00, 0x00}) // CONNACK accepted

			sub := body(peer.next(t, 8))
			if filter, _ := str(sub[2:]); filter != "cmd/s1/#" {
				t.Fatalf("subscribed to %q", filter)
			}
			peer.send(t, []byte{0x90, 0x03, sub[0], sub[1], qos}) // SUBACK
			cmd := append([]byte{0x30, byte(2 + 9 + 2)}, 0, 9)
			cmd = append(append(cmd, "cmd/s1/go"...), "on"...)
			peer.send(t, cmd)

			for seq := 1; seq <= 3; seq++ {
				pkt := peer.next(t, 3)
				if got := (pkt[0] >> 1) & 3; got != qos {
					t.Fatalf("publish qos %d", got)
				}
				topic, rest := str(body(pkt))
				if topic != "sensors/s1/temp" {
					t.Fatalf("topic %q", topic)
				}
				if qos > 0 {
					peer.send(t, []byte{0x40, 0x02, rest[0], rest[1]}) // PUBACK
					rest = rest[2:]
				}
				var r Reading
				if err := json.Unmarshal(rest, &r); err != nil || r.ID != "s1" || r.Seq != seq {
					t.Fatalf("payload %s: %+v, %v", rest, r, err)
				}
			}
			peer.next(t, 14) // DISCONNECT
			select {
			case err := <-errc:
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return after count")
			}
			if s := peer.fr.Stats(); s.Dropped() != 0 || s.Good < 6 {
				t.Fatalf("peer frame stats %+v", s)
			}
			if !strings.Contains(out.String(), "cmd/s1/go on\n") {
				t.Fatalf("subscription output %q", out.String())
			}
		})
	}
}

// Cancelling while waiting for a CONNACK that never comes returns promptly.
func TestSimulatorCancelDuringConnect(t *testing.T) {
	master, slave := newPty(t)
	peer := startPeer(t, master)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, Config{Device: slave, ClientID: "s2", Topic: "t", Interval: time.Second})
	}()
	peer.next(t, 1)
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// No CONNACK at all: paho's connect timeout fires through the port's
// deadline support.
func TestSimulatorConnectTimeout(t *testing.T) {
	master, slave := newPty(t)
	startPeer(t, master)
	err := Run(context.Background(), Config{Device: slave, ClientID: "s3", Topic: "t", Interval: time.Second, ConnectTimeout: 200 * time.Millisecond})
	if err == nil {
		t.Fatal("connect without CONNACK succeeded")
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]time.Duration{"1/s": time.Second, "10/s": 100 * time.Millisecond, "30/m": 2 * time.Second, "2/h": 30 * time.Minute, "250ms": 250 * time.Millisecond} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0/s", "1/d", "x/s", "-1s", "fast"} {
		if _, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) succeeded", in)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	err := Run(context.Background(), Config{Topic: "a/#", QoS: 3, Count: -1})
	for _, key := range []string{"device", "client id", "topic", "interval", "count", "qos"} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("error %v does not name %q", err, key)
		}
	}
}
