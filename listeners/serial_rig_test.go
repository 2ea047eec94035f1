package listeners_test

// Helpers for end-to-end tests of the serial listener: a real gateway with a
// TCP listener and a paho subscriber on one side, and on the other a sensor
// that speaks raw MQTT packets through a pseudo-terminal reached via a
// symlink (the "device path"), so that a test can unplug and replug it.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/devices/framing"
	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
	"github.com/edgegw/edgegw/listeners"
)

const serialWait = 10 * time.Second // upper bound of every wait in these tests

// serialDev is a pseudo-terminal: the gateway opens the slave (through a
// symlink), the test is the sensor on the master. t is only used by the
// test's goroutine (a subtest may swap it in while it drives the device).
type serialDev struct {
	t    testing.TB
	mode framing.Mode
	m    *os.File // master, non-blocking: Close interrupts readLoop at once
	s    *os.File // the test's own slave fd: keeps the termios and avoids EIO on the master
	link string   // symlink to the slave

	ver  atomic.Uint32 // protocol level used to encode and decode
	sent atomic.Uint64 // packets sent (framed: good frames)
	bad  atomic.Value  // first undecodable packet from the gateway (error)
	in   chan packet.Packet
	done chan struct{}
	once sync.Once
}

// openSerialDev opens a pty and points link at its slave.
func openSerialDev(t testing.TB, mode framing.Mode, link string) *serialDev {
	t.Helper()
	ptm, pts := testutil.Pty(t)
	d := &serialDev{t: t, mode: mode, m: ptm, s: pts, link: link,
		in: make(chan packet.Packet, 64), done: make(chan struct{})}
	d.ver.Store(uint32(packet.V311))
	if err := os.Symlink(pts.Name(), link); err != nil {
		t.Fatal(err)
	}
	go d.readLoop()
	return d
}

// unplug removes the device: the symlink first (so a reopen fails), then
// the master (the gateway's slave hangs up), then the test's slave.
func (d *serialDev) unplug() {
	d.once.Do(func() {
		os.Remove(d.link)
		d.m.Close()
		<-d.done
		d.s.Close()
	})
}

// readLoop decodes what the gateway sends until the master is closed.
func (d *serialDev) readLoop() {
	defer close(d.done)
	defer close(d.in)
	if d.mode == framing.ModeRaw {
		br := bufio.NewReader(d.m)
		for {
			p, err := packet.Decode(br, packet.Version(d.ver.Load()), 0)
			if err != nil {
				if _, ok := errors.AsType[*packet.Error](err); ok {
					d.bad.CompareAndSwap(nil, err)
				}
				return
			}
			d.in <- p
		}
	}
	fr := framing.NewReader(d.m, framing.DefaultMaxFrame)
	for {
		b, err := fr.ReadFrame()
		if err != nil {
			return
		}
		p, _, err := packet.DecodeBytes(b, packet.Version(d.ver.Load()), 0)
		if err != nil {
			d.bad.CompareAndSwap(nil, err)
			continue
		}
		d.in <- p
	}
}

// write writes bytes as they are (garbage, hand-made frames).
func (d *serialDev) write(b []byte) {
	d.t.Helper()
	d.m.SetWriteDeadline(time.Now().Add(serialWait))
	if _, err := d.m.Write(b); err != nil {
		d.t.Fatalf("sensor write: %v", err)
	}
}

// encode returns what send would write for p.
func (d *serialDev) encode(p packet.Packet) []byte {
	d.t.Helper()
	b, err := packet.Append(nil, p, packet.Version(d.ver.Load()))
	if err != nil {
		d.t.Fatal(err)
	}
	if d.mode == framing.ModeRaw {
		return b
	}
	return framing.AppendFrame(nil, b)
}

func (d *serialDev) send(p packet.Packet) {
	d.t.Helper()
	d.write(d.encode(p))
	d.sent.Add(1)
}

func (d *serialDev) expect(want packet.Type) packet.Packet {
	d.t.Helper()
	if err := d.bad.Load(); err != nil {
		d.t.Fatalf("sensor: bad packet from the gateway: %v", err)
	}
	select {
	case p, ok := <-d.in:
		if !ok {
			d.t.Fatalf("link closed waiting for %v", want)
		}
		if p.Type() != want {
			d.t.Fatalf("got %v %+v, want %v", p.Type(), p, want)
		}
		return p
	case <-time.After(serialWait):
		d.t.Fatalf("timed out waiting for %v", want)
	}
	return nil
}

// connect opens a logical connection: clean start, a will on
// sensors/<id>/status.
func (d *serialDev) connect(id string, v packet.Version, keepAlive uint16) *packet.Connack {
	d.t.Helper()
	d.ver.Store(uint32(v))
	d.send(&packet.Connect{ProtocolName: "MQTT", Version: v, CleanStart: true, KeepAlive: keepAlive, ClientID: id,
		Will: &packet.Will{Topic: "sensors/" + id + "/status", Payload: []byte("offline")}})
	ack := d.expect(packet.CONNACK).(*packet.Connack)
	if ack.ReasonCode != 0 {
		d.t.Fatalf("connack %v", ack.ReasonCode)
	}
	return ack
}

// publish sends a PUBLISH and runs the sensor's side of its QoS flow.
func (d *serialDev) publish(topic, payload string, qos byte, id uint16) {
	d.t.Helper()
	pub := &packet.Publish{Topic: topic, QoS: qos, Payload: []byte(payload)}
	if qos > 0 {
		pub.PacketID = id
	}
	d.send(pub)
	switch qos {
	case 1:
		if ack := d.expect(packet.PUBACK).(*packet.Puback); ack.PacketID != id {
			d.t.Fatalf("puback id %d, want %d", ack.PacketID, id)
		}
	case 2:
		if rec := d.expect(packet.PUBREC).(*packet.Pubrec); rec.PacketID != id {
			d.t.Fatalf("pubrec id %d, want %d", rec.PacketID, id)
		}
		d.send(&packet.Pubrel{PacketID: id})
		if comp := d.expect(packet.PUBCOMP).(*packet.Pubcomp); comp.PacketID != id {
			d.t.Fatalf("pubcomp id %d, want %d", comp.PacketID, id)
		}
	}
}

// ping is a round trip: everything sent before it has been handled.
func (d *serialDev) ping() {
	d.t.Helper()
	d.send(&packet.Pingreq{})
	d.expect(packet.PINGRESP)
}

// serialRig is a gateway with a TCP listener, a paho subscriber on
// sensors/#, and a serial listener on a device path in t.TempDir().
type serialRig struct {
	t    *testing.T
	h    *harness
	mode framing.Mode
	path string
	ser  *listeners.Serial
	tcp  string // TCP listener address
	dash mqtt.Client
	got  qcollector

	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	devs   []*serialDev
}

func newSerialRig(t *testing.T, mode framing.Mode) *serialRig {
	t.Helper()
	r := &serialRig{t: t, mode: mode, path: filepath.Join(t.TempDir(), "ttyUSB0")}
	r.h = newHarness(t, gateway.Options{AllowAnonymous: true})
	r.tcp = r.h.tcp(nil, false)
	r.dash = mustPaho(t, "tcp://"+r.tcp, "dash", nil)
	waitTok(t, r.dash.Subscribe("sensors/#", 2, r.got.handle), "subscribe")
	r.ser = &listeners.Serial{Name: "uart0", Device: r.path, Framing: mode, Log: r.h.log}
	if err := r.ser.Listen(); err != nil {
		t.Fatal(err)
	}
	// Runs before the harness's cleanup: stop the listener, then the ptys.
	t.Cleanup(func() {
		if r.cancel != nil {
			r.cancel()
		}
		r.wg.Wait()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, d := range r.devs {
			d.unplug()
		}
	})
	return r
}

// startSerialRig is a rig whose listener runs and has opened the device.
func startSerialRig(t *testing.T, mode framing.Mode) (*serialRig, *serialDev) {
	t.Helper()
	r := newSerialRig(t, mode)
	d := r.plug()
	r.start()
	r.waitOpen(1)
	return r, d
}

// start runs the serial listener until the test ends.
func (r *serialRig) start() {
	ctx, cancel := context.WithCancel(r.h.ctx)
	r.cancel = cancel
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if err := r.ser.Serve(ctx, r.h.establish); err != nil {
			r.t.Errorf("serial serve: %v", err)
		}
	}()
}

// plug creates a pty at the rig's device path.
func (r *serialRig) plug() *serialDev {
	r.t.Helper()
	d := openSerialDev(r.t, r.mode, r.path)
	r.mu.Lock()
	r.devs = append(r.devs, d)
	r.mu.Unlock()
	return d
}

// waitOpen waits until the device has been opened n times and is open.
// The sensor must not write before: until the gateway sets raw mode the
// pty echoes.
func (r *serialRig) waitOpen(n uint64) {
	r.t.Helper()
	testutil.Eventually(r.t, serialWait, fmt.Sprintf("device open (#%d)", n), func() bool {
		st := r.ser.Stats()
		return st.State == "open" && st.Opens == n
	})
}

// waitMsg waits until the subscriber got want ("topic=payload@qos").
func (r *serialRig) waitMsg(want string) {
	r.t.Helper()
	testutil.Eventually(r.t, serialWait, want+" at the tcp subscriber", func() bool { return r.got.count(want) > 0 })
}

// deliver has the sensor publish and waits until the TCP subscriber has
// the message.
func (r *serialRig) deliver(d *serialDev, topic, payload string, qos byte, id uint16) {
	r.t.Helper()
	d.publish(topic, payload, qos, id)
	r.waitMsg(fmt.Sprintf("%s=%s@%d", topic, payload, qos))
}

// qcollector gathers "topic=payload@qos" of received messages.
type qcollector struct {
	mu   sync.Mutex
	msgs []string
}

func (c *qcollector) handle(_ mqtt.Client, m mqtt.Message) {
	c.mu.Lock()
	c.msgs = append(c.msgs, fmt.Sprintf("%s=%s@%d", m.Topic(), m.Payload(), m.Qos()))
	c.mu.Unlock()
}

func (c *qcollector) count(want string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range c.msgs {
		if m == want {
			n++
		}
	}
	return n
}

func (c *qcollector) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.msgs, ", ")
}

// frameStats returns what a fresh frame Reader counts on b (which should end
// with 0x00): the expected effect of b on the gateway's counters.
func frameStats(b []byte) framing.Stats {
	fr := framing.NewReader(bytes.NewReader(b), framing.DefaultMaxFrame)
	for {
		if _, err := fr.ReadFrame(); err == io.EOF {
			return fr.Stats()
		}
	}
}
