package bridge_test

// The bridge's tests put a testutil.Proxy between the bridge and
// mosquitto (CONVENTIONS 17) for the link's faults: Freeze (a half-open
// uplink, where not even a close gets through), Refuse, Cut, SetDelay,
// SetRate. watchFlows reads the publish flows crossing it packet by
// packet: it counts the QoS 1/2 PUBLISH packets forwarded upstream that
// have not yet been acknowledged, and the re-sends after a reconnect
// (PUBLISH with DUP set, and PUBREL for an id with no PUBREC on that
// connection); it drops the broker's packets of one type (a lost PUBREC
// or PUBCOMP: swallow), holds the broker's PUBACK and PUBCOMP back while
// every other packet passes (holdAcks, on the proxy's Hold), and tells whether the bridge wrote a QoS 1/2 publish of
// a payload (published). PROXY_TRACE=1 logs every publish-flow packet.

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
)

// proxy is a testutil.Proxy in front of mosquitto, and the bridge's URL
// of it.
type proxy struct{ *testutil.Proxy }

func startProxy(t testing.TB, target string) proxy {
	return proxy{testutil.StartProxy(t, target)}
}

func (p proxy) url() string { return "tcp://" + p.Addr() }

// setLink delays every packet by oneWay in each direction (a round trip
// of 2*oneWay) and, if rate > 0, lets at most rate bytes per second
// through each way.
func (p proxy) setLink(oneWay time.Duration, rate int) {
	for _, d := range []testutil.Dir{testutil.Up, testutil.Down} {
		p.SetDelay(d, oneWay)
		p.SetRate(d, rate)
	}
}

// mqttPacket is the parts of one whole MQTT packet the filters read.
type mqttPacket struct {
	typ  byte
	qos  byte   // PUBLISH
	dup  bool   // PUBLISH
	id   uint16 // PUBLISH with QoS > 0, PUBACK to PUBCOMP
	body []byte // past the fixed header
}

func readMQTT(b []byte) mqttPacket {
	p := mqttPacket{typ: b[0] >> 4, qos: (b[0] >> 1) & 3, dup: b[0]&0x08 != 0}
	body := b[1:]
	for body[0]&0x80 != 0 { // the remaining length
		body = body[1:]
	}
	p.body = body[1:]
	switch {
	case p.typ == 3 && p.qos > 0:
		p.id = binary.BigEndian.Uint16(p.body[2+int(binary.BigEndian.Uint16(p.body)):])
	case p.typ >= 4 && p.typ <= 7:
		p.id = binary.BigEndian.Uint16(p.body)
	}
	return p
}

// payload is a QoS 1/2 PUBLISH's payload (v5: the bridge's connection
// is MQTT 5, its properties come first).
func (p mqttPacket) payload(v5 bool) []byte {
	b := p.body[2+int(binary.BigEndian.Uint16(p.body))+2:]
	if v5 { // the properties' length, then them
		n, mul, k := 0, 1, 0
		for ; k < 4; k++ {
			n += int(b[k]&0x7f) * mul
			mul *= 128
			if b[k]&0x80 == 0 {
				break
			}
		}
		b = b[k+1+n:]
	}
	return b
}

// connectFlags returns a CONNECT's protocol level and flags.
func (p mqttPacket) connectFlags() (level, flags byte) { return p.body[6], p.body[7] }

// flows is what watchFlows counts. Its counts are per connection where
// the bridge has one connection at a time through the proxy: a CONNECT
// starts them again.
type flows struct {
	px          proxy
	mu          sync.Mutex
	v5          bool            // the bridge's connection is MQTT 5
	out         map[uint16]bool // QoS 1/2 PUBLISH ids sent upstream, not yet acked
	recs        map[uint16]bool // ids of PUBREC forwarded to the bridge, not yet PUBREL'd
	maxOutstand int             // the most in out at once
	payloads    map[string]bool // payloads of the QoS 1/2 publishes the bridge wrote
	swallowType byte            // packet type from the broker dropped (0: none)
	swallowed   int
	dupPublish  int  // PUBLISH with DUP set forwarded upstream
	resentRel   int  // PUBREL forwarded upstream for an id with no PUBREC on its connection
	holding     bool // the broker's PUBACK and PUBCOMP are held at the proxy
}

// watchFlows puts the flows' filters on px, for the connections made
// from then on.
func watchFlows(px proxy) *flows {
	f := &flows{px: px, out: map[uint16]bool{}, recs: map[uint16]bool{}, payloads: map[string]bool{}}
	trace := os.Getenv("PROXY_TRACE") != ""
	px.Filter(testutil.Up, func(b []byte) testutil.Verdict {
		p := readMQTT(b)
		if trace {
			tracePacket(f, "up", p)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		switch {
		case p.typ == 1:
			level, _ := p.connectFlags()
			f.v5 = level == 5
			clear(f.out)
			clear(f.recs)
		case p.typ == 6:
			if !f.recs[p.id] {
				f.resentRel++
			}
			delete(f.recs, p.id)
		case p.typ == 3 && p.qos > 0:
			if p.dup {
				f.dupPublish++
			}
			f.payloads[string(p.payload(f.v5))] = true
			f.out[p.id] = true
			f.maxOutstand = max(f.maxOutstand, len(f.out))
		}
		return testutil.Pass
	})
	px.Filter(testutil.Down, func(b []byte) testutil.Verdict {
		p := readMQTT(b)
		if trace {
			tracePacket(f, "down", p)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if p.typ == f.swallowType {
			f.swallowed++
			return testutil.Drop
		}
		switch p.typ {
		case 5:
			f.recs[p.id] = true
		case 4, 7:
			delete(f.out, p.id)
			if f.holding {
				return testutil.Hold
			}
		}
		return testutil.Pass
	})
	return f
}

// swallow drops packets of type typ (5 PUBREC, 7 PUBCOMP) from the broker
// to the bridge; 0 forwards everything again.
func (f *flows) swallow(typ byte) {
	f.mu.Lock()
	f.swallowType = typ
	f.mu.Unlock()
}

// holdAcks lets the next pass PUBACK and PUBCOMP from the broker through
// and holds every later one back (PUBREC and every other packet still
// pass), until passAcks or releaseAcks.
func (f *flows) holdAcks(pass int) {
	f.mu.Lock()
	f.holding = true
	f.mu.Unlock()
	f.px.Allow(testutil.Down, pass)
}

// passAcks lets n more acks through, the held ones first.
func (f *flows) passAcks(n int) { f.px.Release(testutil.Down, n) }

// releaseAcks forwards the acks held back, in order, and ends the hold.
func (f *flows) releaseAcks() {
	f.mu.Lock()
	f.holding = false
	f.mu.Unlock()
	f.px.Allow(testutil.Down, -1)
}

// acksHeld returns how many acks are held back now and how many more
// may go.
func (f *flows) acksHeld() (held, pass int) { return f.px.Held(testutil.Down) }

// published reports whether the bridge wrote a QoS 1/2 publish of
// payload (the proxy read it, whether or not the link delivered it yet).
func (f *flows) published(payload string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.payloads[payload]
}

// counts returns how many packets were swallowed, DUP PUBLISH and re-sent
// PUBREL forwarded.
func (f *flows) counts() (swallowed, dupPublish, resentRel int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.swallowed, f.dupPublish, f.resentRel
}

// maxOutstanding returns the most QoS 1/2 publishes forwarded upstream
// and not yet acknowledged at once, on one connection.
func (f *flows) maxOutstanding() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maxOutstand
}

func tracePacket(f *flows, dir string, p mqttPacket) {
	switch {
	case p.typ == 3:
		f.mu.Lock()
		v5 := f.v5
		f.mu.Unlock()
		var pl []byte
		if p.qos > 0 {
			pl = p.payload(v5)
		}
		fmt.Fprintf(os.Stderr, "TRACE %p %s PUBLISH id=%d dup=%v %s\n", f, dir, p.id, p.dup, pl)
	case p.typ >= 4 && p.typ <= 7:
		fmt.Fprintf(os.Stderr, "TRACE %p %s %d id=%d\n", f, dir, p.typ, p.id)
	}
}
