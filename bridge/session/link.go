package session

// One connection of the engine. Connect writes CONNECT, reads CONNACK,
// resumes or resets the session by its session present flag, and starts
// the link's two goroutines: the reader (every packet from the peer is
// handled on it, acks and inbound publishes alike) and the timer
// (keepalive and the ack watchdog). Publish and Subscribe are the
// sender's.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/edgegw/edgegw/bridge/wire"
	"github.com/edgegw/edgegw/gateway/packet"
)

// Why a link ended, beside the wire's errors (wire.ErrWriteTimeout, a
// read error).
var (
	// ErrKeepalive: nothing read from the peer for 1.5 times the keepalive.
	ErrKeepalive = errors.New("keepalive: no packet from upstream")
	// ErrWatchdog: the oldest unacknowledged publish is older than the
	// ack timeout and nothing was read from upstream since it was sent.
	ErrWatchdog = errors.New("ack watchdog: no ack and nothing from upstream")
	// ErrVersionRefused: the peer does not speak the protocol version.
	ErrVersionRefused = errors.New("upstream refuses the protocol version")
	// ErrServerDisconnect: the peer sent DISCONNECT (MQTT 5); the link's
	// error is then a *DisconnectError, which says its reason code.
	ErrServerDisconnect = errors.New("upstream sent DISCONNECT")
	// ErrStopped: the link was closed by its owner.
	ErrStopped = errors.New("stopped")
	// ErrNoAnswer: a SUBSCRIBE or UNSUBSCRIBE was not answered within
	// the ack timeout. The peer holds its packet id until it answers
	// [MQTT-2.2.1-3], so the link is torn down: a new connection frees it.
	ErrNoAnswer = errors.New("no answer to a SUBSCRIBE or UNSUBSCRIBE")
)

// DisconnectError is the peer's DISCONNECT (MQTT 5) as the link's end:
// its reason code says why the peer ended it (0x8E: another connection
// took the session over [MQTT-3.1.4-3]). It is ErrServerDisconnect.
type DisconnectError struct{ Code byte }

func (e *DisconnectError) Error() string {
	return fmt.Sprintf("%v 0x%02x", ErrServerDisconnect, e.Code)
}

func (e *DisconnectError) Is(target error) bool { return target == ErrServerDisconnect }

// ConnackError is a CONNACK refusing the connection.
type ConnackError struct{ Code byte }

func (e *ConnackError) Error() string { return fmt.Sprintf("CONNACK refused: 0x%02x", e.Code) }

// Link is one connection of the engine.
type Link struct {
	e *Engine
	c *wire.Conn

	// From the CONNACK.
	SessionPresent bool
	ReceiveMaximum int  // the peer's (65535 over 3.1.1)
	MaxPacketSize  int  // the peer's (0: none)
	MaxQoS         byte // the peer's
	Retain         bool // the peer takes retained messages
	keepAlive      time.Duration

	resumed []*Flow
	lost    int // flows reset by session present 0

	wg      sync.WaitGroup
	release []*Flow // the reader's: flows whose PUBREC awaits the Store

	// The QoS 2 window's view of this link (quota.go).
	heldMu   sync.Mutex // orders the sends of held flows and new QoS 2 flows
	recs     int        // the reader's: QoS 2 PUBLISHes the peer answered with a PUBREC on this link
	peak2    int        // under the engine's mu: the most QoS 2 flows on the wire at once
	learned  int        // under the engine's mu: the window this link's end taught (0: none)
	quotaEnd bool       // under the engine's mu: it ended with the quota signature
}

// Connect brings a connection up over nc, which it owns from now on.
func (e *Engine) Connect(ctx context.Context, nc net.Conn) (*Link, error) {
	codec := wire.For(e.cfg.Version)
	c := wire.New(nc, codec, wire.Options{WriteTimeout: e.cfg.WriteTimeout, MaxPacketSize: e.cfg.MaxPacketSize})
	l := &Link{e: e, c: c, ReceiveMaximum: 65535, MaxQoS: 2, Retain: true, keepAlive: e.cfg.KeepAlive}
	connack, err := l.handshake(ctx, nc)
	if err != nil {
		c.Abort(err)
		return nil, err
	}
	l.SessionPresent = connack.SessionPresent
	if e.cfg.Version == packet.V5 {
		p := &connack.Props
		if p.Has(packet.PropReceiveMaximum) && p.ReceiveMaximum > 0 {
			l.ReceiveMaximum = int(p.ReceiveMaximum)
		}
		if p.Has(packet.PropMaximumPacketSize) {
			l.MaxPacketSize = int(p.MaximumPacketSize)
		}
		if p.Has(packet.PropMaximumQoS) {
			l.MaxQoS = p.MaximumQoS
		}
		if p.Has(packet.PropRetainAvailable) {
			l.Retain = p.RetainAvailable != 0
		}
		if p.Has(packet.PropServerKeepAlive) {
			l.keepAlive = time.Duration(p.ServerKeepAlive) * time.Second // [MQTT-3.2.2-21]
		}
	}
	if err := l.resume(); err != nil {
		c.Abort(err)
		return nil, err
	}
	e.mu.Lock()
	e.link = l
	e.mu.Unlock()
	l.wg.Add(2)
	go func() { defer l.wg.Done(); l.readLoop() }()
	go func() { defer l.wg.Done(); l.timerLoop() }()
	return l, nil
}

// handshake writes CONNECT and reads CONNACK within ConnectTimeout.
func (l *Link) handshake(ctx context.Context, nc net.Conn) (*packet.Connack, error) {
	cfg := &l.e.cfg
	cp := &packet.Connect{
		ProtocolName: "MQTT", Version: cfg.Version, CleanStart: cfg.CleanStart,
		KeepAlive: uint16(cfg.KeepAlive / time.Second), ClientID: cfg.ClientID,
		UsernameFlag: cfg.Username != "", Username: cfg.Username,
		PasswordFlag: cfg.Password != "", Password: []byte(cfg.Password),
	}
	if cfg.Version != packet.V5 && cfg.BridgeFlag {
		cp.Version = 0x84
	}
	if cfg.Version == packet.V5 && !cfg.CleanStart {
		// Kept by the broker until the bridge comes back [MQTT-3.1.2-23],
		// as clean session 0 does over 3.1.1.
		cp.Props.SessionExpiry = 0xFFFFFFFF
		cp.Props.Set(packet.PropSessionExpiry)
	}
	if err := l.c.Send(cp); err != nil {
		return nil, fmt.Errorf("send CONNECT: %w", err)
	}
	deadline := time.Now().Add(cfg.ConnectTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := nc.SetReadDeadline(deadline); err != nil {
		return nil, fmt.Errorf("set read deadline: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { nc.SetReadDeadline(time.Unix(1, 0)) })
	p, err := l.c.Read()
	stop()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if cfg.Version == packet.V5 && l.refused311(err) {
			return nil, ErrVersionRefused
		}
		return nil, fmt.Errorf("read CONNACK: %w", err)
	}
	if err := nc.SetReadDeadline(time.Time{}); err != nil {
		return nil, fmt.Errorf("clear read deadline: %w", err)
	}
	ca, ok := p.(*packet.Connack)
	if !ok {
		return nil, fmt.Errorf("read CONNACK: got %s", p.Type())
	}
	if ca.ReasonCode != 0 {
		if ca.ReasonCode == 0x84 || (cfg.Version != packet.V5 && ca.ReasonCode == 1) {
			return nil, fmt.Errorf("%w: %w", ErrVersionRefused, &ConnackError{Code: byte(ca.ReasonCode)})
		}
		return nil, &ConnackError{Code: byte(ca.ReasonCode)}
	}
	return ca, nil
}

// refused311 reports whether a failed MQTT 5 CONNACK read was a 3.1.1
// broker's "unacceptable protocol version" (return code 1,
// [MQTT-3.1.2-2](3.1.1)), which is not a valid MQTT 5 CONNACK.
func (l *Link) refused311(err error) bool {
	var pe *packet.Error
	return errors.As(err, &pe)
}

// resume re-sends the flows of a present session under their ids, oldest
// record first, the PUBLISH with DUP set before a PUBREC and the PUBREL
// after one [MQTT-4.4.0-1]; with no session present, or a clean session
// (whatever the CONNACK says: the client discards its state,
// [MQTT-3.1.2-6]), they are reset and their records go again as new
// messages.
func (l *Link) resume() error {
	e := l.e
	e.mu.Lock()
	if !l.SessionPresent || e.cfg.CleanStart {
		reset := e.resetLocked()
		e.mu.Unlock()
		l.lost = len(reset)
		for _, f := range reset {
			close(f.done)
		}
		if err := e.store.ResetFlows(); err != nil {
			return fmt.Errorf("reset stored flows: %w", err)
		}
		if rel := e.cfg.Release; rel != nil {
			if err := rel(0); err != nil {
				return fmt.Errorf("forget inbound ids: %w", err)
			}
		}
		return nil
	}
	// Over a learned QoS 2 window, PUBRELs all go (they free the peer's
	// quota, and their flows hold it until then) and of the other flows
	// as many as the window holds; the rest wait (quota.go).
	fs := e.sortedLocked()
	e.held = e.held[:0]
	onWire := 0
	for _, f := range fs {
		if f.released {
			onWire++
		}
	}
	now := time.Now()
	var send []*Flow
	for _, f := range fs {
		if !f.released && f.QoS == 2 && e.win2 > 0 && onWire >= e.win2 {
			f.sent = time.Time{}
			e.held = append(e.held, f)
			continue
		}
		if !f.released {
			onWire++
		}
		f.sent = now
		send = append(send, f)
	}
	for _, f := range send {
		l.sentOnLocked(f)
	}
	e.mu.Unlock()
	for _, f := range send {
		e.mu.Lock()
		rel, pub := f.released, f.pub
		e.mu.Unlock()
		var p packet.Packet
		switch {
		case rel:
			p = &packet.Pubrel{PacketID: f.ID}
		default:
			if pub == nil {
				var err error
				if pub, err = e.load(f); err != nil {
					return err
				}
			}
			dup := *pub
			dup.Dup = true // [MQTT-3.3.1-1]
			p = &dup
		}
		if err := l.c.Send(p); err != nil {
			return fmt.Errorf("re-send flow of record %d: %w", f.Rec, err)
		}
	}
	l.resumed = fs
	return nil
}

// load reads a restored flow's PUBLISH from the spool.
func (e *Engine) load(f *Flow) (*packet.Publish, error) {
	if e.cfg.Load == nil {
		return nil, fmt.Errorf("flow of record %d: no Load", f.Rec)
	}
	pub, err := e.cfg.Load(f.Rec)
	if err != nil {
		return nil, fmt.Errorf("load record %d: %w", f.Rec, err)
	}
	pub.PacketID, pub.QoS = f.ID, f.QoS
	e.mu.Lock()
	f.pub = pub
	f.Size = packet.Size(pub, e.cfg.Version)
	e.bytes += f.Size
	e.mu.Unlock()
	return pub, nil
}

// Resumed returns the flows re-sent on connect, oldest record first.
func (l *Link) Resumed() []*Flow { return l.resumed }

// LostFlows returns how many flows were reset on connect because the
// peer had no session.
func (l *Link) LostFlows() int { return l.lost }

// Done is closed when the link ended.
func (l *Link) Done() <-chan struct{} { return l.c.Done() }

// Err returns why the link ended (nil while it is up).
func (l *Link) Err() error { return l.c.Err() }

// LastRead returns when the last packet was read from the peer.
func (l *Link) LastRead() time.Time { return l.c.LastRead() }

// Written returns the bytes written to the peer so far.
func (l *Link) Written() uint64 { return l.c.Written() }

// Close ends the link: with bye, a DISCONNECT is written first (within
// the write timeout). It waits for the link's goroutines.
func (l *Link) Close(bye bool) {
	if bye {
		if l.c.SendControl(&packet.Disconnect{}) == nil {
			l.c.Close()
		}
	}
	l.c.Abort(ErrStopped)
	l.wg.Wait()
	l.e.mu.Lock()
	if l.e.link == l {
		l.e.link = nil
	}
	l.e.mu.Unlock()
}

// Teardown ends the link at once with err as its reason; the goroutines
// end on their own (Close waits for them).
func (l *Link) Teardown(err error) { l.c.Abort(err) }

// Publish sends the message of record rec. QoS 0 is written and
// forgotten (nil flow). A QoS 1/2 publish waits for room in the window
// and for its packet id, then starts a flow; a record with a flow
// already (one resumed on connect) gets that flow, not a second copy.
// An error means the link is down; a flow started stays in the session
// and is re-sent on the next connection.
func (l *Link) Publish(ctx context.Context, rec uint64, pub *packet.Publish) (*Flow, error) {
	if pub.QoS == 0 {
		return nil, l.c.Send(pub)
	}
	e := l.e
	pub.PacketID = 1 // set below; any id gives the size on the wire
	size := packet.Size(pub, e.cfg.Version)
	maxCount := l.ReceiveMaximum
	if m := e.cfg.MaxInflight; m > 0 && m < maxCount {
		maxCount = m
	}
	qos2 := pub.QoS == 2
	for {
		if qos2 {
			// A new QoS 2 flow goes after the held ones (quota.go).
			l.heldMu.Lock()
			if err := l.sendHeldLocked(); err != nil {
				l.heldMu.Unlock()
				return nil, err
			}
		}
		e.mu.Lock()
		if f := e.byRec[rec]; f != nil {
			e.mu.Unlock()
			if qos2 {
				l.heldMu.Unlock()
			}
			return f, nil
		}
		id := wireID(rec)
		roomy := e.count < maxCount && (pub.QoS < 2 || e.cfg.Version == packet.V5 || e.cfg.MaxInflightQoS2 == 0 || e.count2 < max(1, e.cfg.MaxInflightQoS2-1)) && (e.cfg.MaxInflightBytes == 0 || e.count == 0 || e.bytes+size <= e.cfg.MaxInflightBytes)
		if qos2 {
			roomy = roomy && len(e.held) == 0 && e.roomFor2Locked()
		}
		if roomy && !e.freeLocked(id) && pub.QoS == 1 {
			id = e.nextFreeLocked()
		}
		if roomy && id != 0 && e.freeLocked(id) {
			f := &Flow{Rec: rec, ID: id, QoS: pub.QoS, Size: size, done: make(chan struct{}), sent: time.Now()}
			pub.PacketID = id
			f.pub = pub
			e.byID[id], e.byRec[rec] = f, f
			e.count++
			if qos2 {
				e.count2++
			}
			e.bytes += size
			l.sentOnLocked(f)
			e.mu.Unlock()
			if qos2 {
				if err := e.store.Sent(rec, id); err != nil {
					e.log.Error("spool: record flow", "id", rec, "err", err)
				}
			}
			err := l.c.Send(pub)
			if qos2 {
				l.heldMu.Unlock()
			}
			return f, err
		}
		changed := e.changedChLocked()
		e.mu.Unlock()
		if qos2 {
			l.heldMu.Unlock()
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-l.c.Done():
			return nil, l.c.Err()
		}
	}
}

// Subscribe sends a SUBSCRIBE and waits (ack_timeout at most) for its
// SUBACK's reason codes.
func (l *Link) Subscribe(ctx context.Context, subs []packet.Subscription) ([]packet.ReasonCode, error) {
	a, err := l.request(ctx, func(id uint16) packet.Packet { return &packet.Subscribe{PacketID: id, Subscriptions: subs} })
	if err != nil {
		return nil, err
	}
	sa, ok := a.(*packet.Suback)
	if !ok {
		return nil, fmt.Errorf("subscribe: answered with %s", a.Type())
	}
	return sa.ReasonCodes, nil
}

// Unsubscribe sends an UNSUBSCRIBE and waits for its UNSUBACK.
func (l *Link) Unsubscribe(ctx context.Context, filters []string) error {
	_, err := l.request(ctx, func(id uint16) packet.Packet { return &packet.Unsubscribe{PacketID: id, Filters: filters} })
	return err
}

func (l *Link) request(ctx context.Context, mk func(id uint16) packet.Packet) (packet.Packet, error) {
	e := l.e
	e.mu.Lock()
	id := e.nextFreeLocked()
	r := &request{done: make(chan struct{})}
	e.reqs[id] = r
	e.mu.Unlock()
	deadline := time.Now().Add(e.cfg.AckTimeout)
	keep := false // the id stays held after the caller stopped waiting
	defer func() {
		if keep {
			return
		}
		e.mu.Lock()
		if e.reqs[id] == r {
			delete(e.reqs, id)
			e.changedLocked()
		}
		e.mu.Unlock()
	}()
	if err := l.c.Send(mk(id)); err != nil {
		return nil, err
	}
	noAnswer := fmt.Errorf("%w within %s", ErrNoAnswer, e.cfg.AckTimeout)
	t := time.NewTimer(e.cfg.AckTimeout)
	defer t.Stop()
	select {
	case <-r.done:
		if r.answer == nil { // the link ended (endRequests)
			if err := l.c.Err(); err != nil {
				return nil, err
			}
			return nil, ErrStopped
		}
		return r.answer, nil
	case <-t.C:
		l.c.Abort(noAnswer)
		return nil, noAnswer
	case <-ctx.Done():
		// The caller stops waiting, the peer may still answer: the id
		// stays held until it does, and without an answer within the ack
		// timeout the link is torn down all the same.
		keep = true
		time.AfterFunc(time.Until(deadline), func() {
			e.mu.Lock()
			waiting := e.reqs[id] == r
			e.mu.Unlock()
			if waiting {
				l.c.Abort(noAnswer)
			}
		})
		return nil, ctx.Err()
	case <-l.c.Done():
		return nil, l.c.Err()
	}
}
