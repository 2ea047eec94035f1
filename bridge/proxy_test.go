package bridge_test

// proxy is a fault-injecting TCP proxy between the bridge and mosquitto
// (CONVENTIONS 17): it forwards whole MQTT packets and can freeze (stop
// forwarding both ways while keeping both sockets open: a half-open
// uplink, where not even a close gets through), refuse new connections,
// reset every connection, delay packets from the broker, and swallow
// packets of one type from the broker (a lost PUBREC or PUBCOMP). It
// counts QoS 1/2 PUBLISH packets it forwarded upstream that have not yet
// been acknowledged back to the bridge, and the re-sends after a
// reconnect: PUBLISH with DUP set, and PUBREL for an id with no PUBREC on
// that connection. setLink makes it a slow link: a one-way delay each way
// and a bandwidth per direction (packets queue behind each other, as in a
// modem's buffer). holdAcks holds the broker's PUBACK and PUBCOMP back
// (every other packet still passes) and lets them through one by one as
// passAcks allows, in the order they came, all of them at releaseAcks: the
// bridge's publishes stay in flight and its window as full as it is, so
// what it sends meanwhile is what it chose to send into that window.
// published tells whether the bridge wrote a QoS 1/2 publish of a payload.
// setQoS2Quota makes it a broker that closes the connection at a QoS 2
// PUBLISH over its receive quota, as mosquitto 2.0 releases after
// Debian's 2.0.11 do ("receive maximum exceeded"; 2.0.11 acknowledges
// and drops it instead).
// PROXY_TRACE=1 logs every publish-flow packet.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

type proxy struct {
	ln     net.Listener
	target string
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu          sync.Mutex
	thaw        chan struct{} // nil when not frozen; closed on unfreeze
	refuse      bool
	ackDelay    time.Duration
	oneWay      time.Duration // delay added each way (setLink)
	rate        int           // bytes/s each way; 0: unlimited
	fwdBytes    int64         // bytes forwarded bridge -> broker
	conns       []net.Conn
	maxOutstand int // largest per-connection count of unacked QoS>0 PUBLISH
	accepted    int
	ackHold     bool            // acks are held back (holdAcks)
	ackPass     int             // held acks that may still go (passAcks)
	ackChange   chan struct{}   // closed (and replaced) when the hold changes
	heldAcks    int             // acks held back now
	payloads    map[string]bool // payloads of the QoS 1/2 publishes the bridge wrote
	swallowType byte            // packet type from the broker not forwarded (0: none)
	swallowed   int
	dupPublish  int // PUBLISH with DUP set forwarded upstream
	resentRel   int // PUBREL forwarded upstream for an id with no PUBREC on its connection

	// setQoS2Quota: the broker's session's incoming QoS 2 flows (PUBLISH
	// forwarded, no PUBREL yet), across connections as a persistent
	// session keeps them.
	quota2      int             // 0: no quota
	q2held      map[uint16]bool // the session's held ids
	quotaCloses int             // connections closed for the quota
	maxHeld2    int             // the most held at once
}

// setQoS2Quota makes the proxy close a connection (after the broker has
// answered what it got before) at a QoS 2 PUBLISH of a new id while the
// session holds n flows; 0 turns it off.
func (p *proxy) setQoS2Quota(n int) {
	p.mu.Lock()
	p.quota2, p.q2held = n, map[uint16]bool{}
	p.mu.Unlock()
}

// quotaStats returns the connections closed for the QoS 2 quota and the
// most QoS 2 flows the session held at once.
func (p *proxy) quotaStats() (closes, maxHeld int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.quotaCloses, p.maxHeld2
}

// overQuota applies the QoS 2 quota to b, a packet from the bridge: true
// when the broker would close the connection at it.
func (p *proxy) overQuota(b []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.quota2 == 0 {
		return false
	}
	switch typ := b[0] >> 4; {
	case typ == 1: // CONNECT: clean session empties the session
		h := 2
		for h < len(b) && b[h-1]&0x80 != 0 {
			h++
		}
		if len(b) > h+7 && b[h+7]&0x02 != 0 {
			clear(p.q2held)
		}
	case typ == 6: // PUBREL: the broker releases the flow
		delete(p.q2held, binary.BigEndian.Uint16(b[2:]))
	case typ == 3 && (b[0]>>1)&3 == 2:
		body := b[1:]
		for body[0]&0x80 != 0 {
			body = body[1:]
		}
		body = body[1:]
		id := binary.BigEndian.Uint16(body[2+int(binary.BigEndian.Uint16(body)):])
		if p.q2held[id] {
			return false // a resend of a flow it has
		}
		if len(p.q2held) >= p.quota2 {
			p.quotaCloses++
			return true
		}
		p.q2held[id] = true
		p.maxHeld2 = max(p.maxHeld2, len(p.q2held))
	}
	return false
}

// swallow stops forwarding packets of type typ (5 PUBREC, 7 PUBCOMP) from
// the broker to the bridge; 0 forwards everything again.
func (p *proxy) swallow(typ byte) {
	p.mu.Lock()
	p.swallowType = typ
	p.mu.Unlock()
}

// holdAcks lets the next pass PUBACK and PUBCOMP from the broker through
// and holds every later one back (PUBREC and every other packet still
// pass), until passAcks or releaseAcks.
func (p *proxy) holdAcks(pass int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ackHold, p.ackPass = true, pass
	p.ackChangedLocked()
}

// passAcks lets n more acks through, the held ones first.
func (p *proxy) passAcks(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ackPass += n
	p.ackChangedLocked()
}

// releaseAcks forwards the acks held back, in order, and ends the hold.
func (p *proxy) releaseAcks() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ackHold, p.ackPass = false, 0
	p.ackChangedLocked()
}

// acksHeld returns how many acks are held back now and how many more
// may go.
func (p *proxy) acksHeld() (held, pass int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.heldAcks, p.ackPass
}

func (p *proxy) ackChangedLocked() {
	if p.ackChange != nil {
		close(p.ackChange)
		p.ackChange = nil
	}
}

// ackChanged returns a channel closed at the hold's next change.
func (p *proxy) ackChanged() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ackChange == nil {
		p.ackChange = make(chan struct{})
	}
	return p.ackChange
}

// mayAck reports whether a held ack may go now, and takes its pass.
func (p *proxy) mayAck() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.ackHold {
		return true
	}
	if p.ackPass > 0 {
		p.ackPass--
		return true
	}
	return false
}

func (p *proxy) addHeld(n int) {
	p.mu.Lock()
	p.heldAcks += n
	p.mu.Unlock()
}

// published reports whether the bridge wrote a QoS 1/2 publish of
// payload (the proxy read it, whether or not the link delivered it yet).
func (p *proxy) published(payload string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.payloads[payload]
}

// counts returns how many packets were swallowed, DUP PUBLISH and re-sent
// PUBREL forwarded.
func (p *proxy) counts() (swallowed, dupPublish, resentRel int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.swallowed, p.dupPublish, p.resentRel
}

func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	// A small fixed receive buffer (no autotuning), like a cellular
	// modem's, so that a frozen proxy backs the bridge's writes up quickly.
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10)
		})
		return errors.Join(err, serr)
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &proxy{ln: ln, target: target, ctx: ctx, cancel: cancel}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) url() string { return "tcp://" + p.ln.Addr().String() }

func (p *proxy) close() {
	p.cancel()
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *proxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.thaw == nil {
		p.thaw = make(chan struct{})
	}
}

func (p *proxy) unfreeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.thaw != nil {
		close(p.thaw)
		p.thaw = nil
	}
}

func (p *proxy) setRefuse(v bool) {
	p.mu.Lock()
	p.refuse = v
	p.mu.Unlock()
}

func (p *proxy) setAckDelay(d time.Duration) {
	p.mu.Lock()
	p.ackDelay = d
	p.mu.Unlock()
}

// setLink delays every packet by oneWay in each direction (a round trip
// of 2*oneWay) and, if rate > 0, lets at most rate bytes per second
// through each way.
func (p *proxy) setLink(oneWay time.Duration, rate int) {
	p.mu.Lock()
	p.oneWay, p.rate = oneWay, rate
	p.mu.Unlock()
}

// forwarded returns the bytes forwarded from the bridge to the broker.
func (p *proxy) forwarded() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fwdBytes
}

func (p *proxy) maxOutstanding() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.maxOutstand
}

// gate blocks while the proxy is frozen; false when the proxy is closing.
func (p *proxy) gate() bool {
	p.mu.Lock()
	ch := p.thaw
	p.mu.Unlock()
	if ch == nil {
		return p.ctx.Err() == nil
	}
	select {
	case <-ch:
		return true
	case <-p.ctx.Done():
		return false
	}
}

func (p *proxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refuse
		p.accepted++
		p.mu.Unlock()
		if refuse {
			c.Close()
			continue
		}

		up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.track(c)
		p.track(up)
		pc := &pconn{p: p, out: map[uint16]bool{}, recs: map[uint16]bool{}, unanswered: map[uint16]bool{}, answered: make(chan struct{}, 1)}
		p.wg.Add(2)
		go pc.pipe(c, up, true)
		go pc.pipe(up, c, false)
	}
}

// pconn is one proxied connection.
type pconn struct {
	p  *proxy
	mu sync.Mutex
	// unanswered: QoS 2 ids forwarded to the broker whose PUBREC has
	// not reached the bridge yet; answered is signalled as one does.
	unanswered map[uint16]bool
	answered   chan struct{}
	out        map[uint16]bool // QoS>0 PUBLISH ids sent upstream, not yet acked to the bridge
	recs       map[uint16]bool // ids of PUBREC forwarded to the bridge, not yet PUBREL'd
	v5         bool            // the bridge connected with MQTT 5 (set by the reader of its side)
}

type frame struct {
	b   []byte
	due time.Time
}

// pipe forwards packets from src to dst; up is the bridge -> broker way.
func (pc *pconn) pipe(src, dst net.Conn, up bool) {
	defer pc.p.wg.Done()
	defer src.Close()
	defer dst.Close()
	frames := make(chan frame, 1<<16)
	var ww sync.WaitGroup
	ww.Add(1)
	go func() { // writer: honours the delay without holding up the reader
		defer ww.Done()
		defer dst.Close()
		t := time.NewTimer(0)
		defer t.Stop()
		var free time.Time // when the link is free again (rate)
		var held [][]byte  // acks from the broker not yet forwarded (holdAcks), in order
		defer func() { pc.p.addHeld(-len(held)) }()
		for {
			change := pc.p.ackChanged() // before the look: no change is missed
			for len(held) > 0 && pc.p.mayAck() {
				if !pc.p.gate() {
					return
				}
				b := held[0]
				held = held[1:]
				pc.p.addHeld(-1)
				pc.acked(b)
				if _, err := dst.Write(b); err != nil {
					pc.p.gate()
					return
				}
			}
			var f frame
			select {
			case g, ok := <-frames:
				if !ok {
					return
				}
				f = g
			case <-change:
				continue
			}
			pc.p.mu.Lock()
			rate := pc.p.rate
			pc.p.mu.Unlock()
			if rate > 0 { // the packet leaves when the link is free and it is due
				f.due = maxTime(f.due, free)
				free = f.due.Add(time.Duration(len(f.b)) * time.Second / time.Duration(rate))
			}
			if d := time.Until(f.due); d > 0 {
				t.Reset(d)
				select {
				case <-t.C:
				case <-pc.p.ctx.Done():
					return
				}
			}
			if !pc.p.gate() {
				return
			}
			if typ := f.b[0] >> 4; !up && (typ == 4 || typ == 7) { // PUBACK, PUBCOMP: in order, through held
				held = append(held, f.b)
				pc.p.addHeld(1)
				continue
			}
			if !up {
				pc.acked(f.b)
			} else {
				pc.p.mu.Lock()
				pc.p.fwdBytes += int64(len(f.b))
				pc.p.mu.Unlock()
			}
			if _, err := dst.Write(f.b); err != nil {
				pc.p.gate() // as above: no close passes a frozen proxy
				return
			}
			if !up && f.b[0]>>4 == 5 {
				pc.mu.Lock()
				delete(pc.unanswered, binary.BigEndian.Uint16(f.b[2:]))
				pc.mu.Unlock()
				select {
				case pc.answered <- struct{}{}:
				default:
				}
			}
		}
	}()
	defer ww.Wait()
	defer close(frames)
	r := bufio.NewReader(gatedReader{pc.p, src})
	for {
		b, err := readPacket(r)
		if err != nil {
			// A blackhole forwards nothing, not even a close: an end
			// seen while frozen (mosquitto dropping the client after
			// its keepalive, say) reaches the other side after the
			// thaw, if ever.
			pc.p.gate()
			return
		}
		if os.Getenv("PROXY_TRACE") != "" {
			tracePacket(pc, up, b)
		}
		pc.p.mu.Lock()
		due := time.Now().Add(pc.p.oneWay)
		pc.p.mu.Unlock()
		if up && pc.p.overQuota(b) {
			// The broker answers what it read before, then closes.
			for pc.waiting() {
				select {
				case <-pc.answered:
				case <-pc.p.ctx.Done():
					return
				}
			}
			return
		}
		if up {
			pc.sent(b)
		} else {
			pc.p.mu.Lock()
			due = due.Add(pc.p.ackDelay)
			drop := b[0]>>4 == pc.p.swallowType
			if drop {
				pc.p.swallowed++
			}
			pc.p.mu.Unlock()
			if drop {
				continue
			}
		}
		select {
		case frames <- frame{b, due}:
		case <-pc.p.ctx.Done():
			return
		}
	}
}

// waiting reports whether a QoS 2 PUBLISH forwarded on pc is still
// unanswered.
func (pc *pconn) waiting() bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return len(pc.unanswered) > 0
}

func (pc *pconn) sent(b []byte) {
	if b[0]>>4 == 1 { // CONNECT: the protocol level follows the name "MQTT"
		h := 2
		for h < len(b) && b[h-1]&0x80 != 0 { // remaining length
			h++
		}
		pc.v5 = len(b) > h+6 && b[h+6] == 5
		return
	}
	if b[0]>>4 == 6 { // PUBREL
		id := binary.BigEndian.Uint16(b[2:])
		pc.mu.Lock()
		resent := !pc.recs[id]
		delete(pc.recs, id)
		pc.mu.Unlock()
		if resent {
			pc.p.mu.Lock()
			pc.p.resentRel++
			pc.p.mu.Unlock()
		}
		return
	}
	if b[0]>>4 != 3 || (b[0]>>1)&3 == 0 {
		return
	}
	if b[0]&0x08 != 0 {
		pc.p.mu.Lock()
		pc.p.dupPublish++
		pc.p.mu.Unlock()
	}
	body := b[1:]
	for body[0]&0x80 != 0 { // skip remaining length
		body = body[1:]
	}
	body = body[1:]
	tl := int(binary.BigEndian.Uint16(body))
	id := binary.BigEndian.Uint16(body[2+tl:])
	payload := body[2+tl+2:]
	if pc.v5 { // the properties come first: their length, then them
		n, mul, k := 0, 1, 0
		for ; k < 4; k++ {
			n += int(payload[k]&0x7f) * mul
			mul *= 128
			if payload[k]&0x80 == 0 {
				break
			}
		}
		payload = payload[k+1+n:]
	}
	pc.p.mu.Lock()
	if pc.p.payloads == nil {
		pc.p.payloads = make(map[string]bool)
	}
	pc.p.payloads[string(payload)] = true
	pc.p.mu.Unlock()
	pc.mu.Lock()
	pc.out[id] = true
	if (b[0]>>1)&3 == 2 {
		pc.unanswered[id] = true
	}
	n := len(pc.out)
	pc.mu.Unlock()
	pc.p.mu.Lock()
	pc.p.maxOutstand = max(pc.p.maxOutstand, n)
	pc.p.mu.Unlock()
}

func (pc *pconn) acked(b []byte) {
	typ := b[0] >> 4
	if typ == 5 { // PUBREC
		pc.mu.Lock()
		pc.recs[binary.BigEndian.Uint16(b[2:])] = true
		pc.mu.Unlock()
		return
	}
	if typ != 4 && typ != 7 { // PUBACK, PUBCOMP
		return
	}
	id := binary.BigEndian.Uint16(b[2:])
	pc.mu.Lock()
	delete(pc.out, id)
	pc.mu.Unlock()
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// readPacket reads one whole MQTT packet.
func readPacket(r *bufio.Reader) ([]byte, error) {
	h, err := r.ReadByte()
	if err != nil {
		return nil, err
	}
	b := []byte{h}
	n, mul := 0, 1
	for i := 0; ; i++ {
		c, err := r.ReadByte()
		if err != nil {
			return nil, err
		}
		b = append(b, c)
		n += int(c&0x7f) * mul
		mul *= 128
		if c&0x80 == 0 || i == 3 {
			break
		}
	}
	start := len(b)
	b = append(b, make([]byte, n)...)
	if _, err := io.ReadFull(r, b[start:]); err != nil {
		return nil, err
	}
	return b, nil
}

// gatedReader stops reading while the proxy is frozen (a read already
// waiting in the kernel still returns, at most one buffer's worth).
type gatedReader struct {
	p *proxy
	c net.Conn
}

func (g gatedReader) Read(b []byte) (int, error) {
	if !g.p.gate() {
		return 0, io.EOF
	}
	return g.c.Read(b)
}

// reset closes every proxied connection (both sides) at once.
func (p *proxy) reset() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

func tracePacket(pc *pconn, up bool, b []byte) {
	typ := b[0] >> 4
	if typ < 3 || typ > 7 {
		return
	}
	body := b[1:]
	for body[0]&0x80 != 0 {
		body = body[1:]
	}
	body = body[1:]
	dir := "down"
	if up {
		dir = "up"
	}
	if typ == 3 {
		tl := int(binary.BigEndian.Uint16(body))
		qos := (b[0] >> 1) & 3
		var id uint16
		p := body[2+tl:]
		if qos > 0 {
			id = binary.BigEndian.Uint16(p)
			p = p[2:]
		}
		fmt.Fprintf(os.Stderr, "TRACE %p %s PUBLISH id=%d dup=%v %s\n", pc, dir, id, b[0]&8 != 0, p)
		return
	}
	fmt.Fprintf(os.Stderr, "TRACE %p %s %d id=%d\n", pc, dir, typ, binary.BigEndian.Uint16(body))
}
