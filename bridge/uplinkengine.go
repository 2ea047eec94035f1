package bridge

// Design note: the uplink on the bridge's own session engine
// (Config.Engine "session", the default; bridge/session). The engine
// owns what paho and paho.golang own on the other path: packet ids, the
// flows of both directions and their resume after a reconnect,
// keepalive, the ack watchdog and the wire (bridge/wire: write_timeout
// on every chunk, acks and PINGREQ before queued publishes); its durable
// state is the spool's session log (spool/session.go), and inbound QoS 2
// ids are the gateway's (inbound.go). The send policy stays the bridge's
// and is the same for every engine: the picker (lanes, drain policy,
// budget), the send window (which also keeps QoS 1 out of a 3.1.1
// broker's quota while QoS 2 flows hold it), the refusals' backoff and
// the stuck-record hint. So the seam is unchanged: uplinkEngine is a
// third implementation of protocol (send.go), whose claim has nothing to
// do (the engine picks the packet id as it publishes), whose publish
// hands the record to Link.Publish and whose finish reads the flow's
// Result. The acker keeps the send order and frees the window; the
// engine's, not the acker's, is the ack watchdog.
//
// One engine lives as long as the bridge's session with its broker: it
// is made at the first connection (the spool is open by then) and again
// only when what the session is (client id, credentials, protocol, clean
// session, timers) changed. Its flows survive reconnects in memory; its
// QoS 2 flows survive a restart in the session log.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edgegw/edgegw/bridge/session"
	"github.com/edgegw/edgegw/bridge/spool"
	"github.com/edgegw/edgegw/bridge/wire"
	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/sockio"
)

// engineKey is what an engine's session is: a change of any of it makes
// a new engine (its QoS 2 flows restored from the session log).
type engineKey struct {
	clientID, username, password string
	v5, bridgeFlag, clean        bool
	keepAlive, connectTimeout    time.Duration
	sp                           *spool.Spool
}

// engineState is the bridge's engine and its session log. Owner
// goroutine only (Run closes the log once the loop has ended).
type engineState struct {
	key engineKey
	e   *session.Engine
	log *spool.Session
}

// engineStore is the spool's session log as the engine's Store. It
// counts what the engine's one place of "acknowledged upstream"
// (session.Engine.acknowledgedUpstream) removes from the spool.
type engineStore struct {
	*spool.Session
	b *Bridge
}

func (s engineStore) Flows() ([]session.StoredFlow, error) {
	fs, err := s.Session.Flows()
	out := make([]session.StoredFlow, len(fs))
	for i, f := range fs {
		out[i] = session.StoredFlow(f)
	}
	return out, err
}

func (s engineStore) Ack(rec uint64) error {
	err := s.Session.Ack(rec)
	s.b.acked.Add(1)
	s.b.peerAcked.Add(1)
	return err
}

func (s engineStore) Drop(rec uint64, rc byte) error {
	err := s.Session.Drop(rec, rc) // in the ledger as refused, not delivered
	s.b.upRefused.dropped[rc].Add(1)
	s.b.upRefusedLog.note(s.b.log, rc)
	return err
}

// engineFor returns the bridge's engine for the session settings in
// force, making it (and opening the session log) if needed.
func (b *Bridge) engineFor(v5 bool, u *url.URL) (*session.Engine, error) {
	sp := b.spool.Load()
	key := engineKey{
		clientID: b.cfg.ClientID, username: b.cfg.Username, password: b.cfg.Password,
		v5: v5, bridgeFlag: b.flagLevel(u.String()) == 0x84, clean: b.cfg.CleanSession,
		keepAlive: b.cfg.KeepAlive, connectTimeout: b.cfg.ConnectTimeout, sp: sp,
	}
	es := &b.eng
	if es.e != nil && es.key == key {
		return es.e, nil
	}
	if es.log == nil || es.key.sp != sp {
		if es.log != nil {
			es.log.Close()
		}
		ss, err := spool.OpenSession(sp)
		if err != nil {
			return nil, err
		}
		es.log = ss
	}
	ver := packet.V311
	if v5 {
		ver = packet.V5
	}
	e, err := session.New(session.Config{
		ClientID: b.cfg.ClientID, Username: b.cfg.Username, Password: b.cfg.Password,
		Version: ver, BridgeFlag: key.bridgeFlag, CleanStart: b.cfg.CleanSession,
		KeepAlive: b.cfg.KeepAlive, WriteTimeout: b.cfg.WriteTimeout, AckTimeout: b.cfg.AckTimeout,
		ConnectTimeout: b.cfg.ConnectTimeout,
		// The send window (window.go) bounds what is in flight; the
		// engine adds the peer's Receive Maximum and the packet ids.
		Load: b.loadRecord, Permanent: permanentRefusal,
		Inbound: b.inboundEngine, Release: b.releaseEngine,
		Logger: b.log,
	}, engineStore{Session: es.log, b: b})
	if err != nil {
		return nil, err
	}
	es.e, es.key = e, key
	return e, nil
}

// closeEngine closes the session log (Run, once the loop has ended).
func (b *Bridge) closeEngine() {
	if b.eng.log != nil {
		if err := b.eng.log.Close(); err != nil {
			b.log.Error("close session log", "err", err)
		}
	}
	b.eng = engineState{}
}

// loadRecord is the PUBLISH of record rec, for a QoS 2 flow a previous
// process started (the engine sets its packet id).
func (b *Bridge) loadRecord(rec uint64) (*packet.Publish, error) {
	m, ok, err := b.spool.Load().Get(spool.ID(rec))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("record %d is not in the spool", rec)
	}
	return enginePublish(m), nil
}

// enginePublish is the PUBLISH of m, packet id aside: packetSize
// (publishSize311, publishSize5) counts exactly this.
func enginePublish(m spool.Message) *packet.Publish {
	return &packet.Publish{Topic: m.Topic, Payload: m.Payload, QoS: m.QoS, Retain: m.Retain}
}

// inboundEngine routes a message from upstream (the engine's reader, in
// order): a QoS 1/2 one through the gateway, which keeps a QoS 2 id with
// the routing (publishIn); an error leaves it unacknowledged.
func (b *Bridge) inboundEngine(p *packet.Publish) (bool, error) {
	local, ok := b.c.Load().inTopic(p.Topic)
	if !ok {
		b.log.Warn("inbound message matches no in rule; dropped", "topic", p.Topic)
		return false, nil
	}
	dup, err := b.publishIn(p.PacketID, &gateway.Message{
		Topic: local, Payload: p.Payload, QoS: p.QoS, Retain: p.Retain, Origin: b.origin,
	})
	if err != nil {
		b.inboundFailed.Add(1)
		b.log.Warn("inbound message refused locally; not acked upstream", "topic", local, "err", err)
		return false, err
	}
	if !dup {
		b.received.Add(1)
	}
	return dup, nil
}

// releaseEngine forgets inbound QoS 2 id (0: every id) in the gateway,
// durably, before the engine's PUBCOMP.
func (b *Bridge) releaseEngine(id uint16) error {
	if eo, ok := b.gw.(exactlyOnce); ok {
		return eo.Release(b.origin, id)
	}
	return nil
}

// meteredConn is the engine's transport: reads are time-stamped for
// Stats and the stuck check, writes debit the byte budget. The wire
// queues a publish and writes it later, in a batch: the picker, which
// waits for the rate limit's bucket before each record, would hand out a
// whole batch on credit. So a publish is debited as it is queued
// (queued), and a write debits only what was not debited before.
//
// Over a plain TCP socket it reads and writes through internal/sockio
// (RawSyscall, the poller still waits and keeps the deadlines): an
// ordinary read or write is the first system call after the process
// went idle whenever upstream's acks arrive, and each such call wakes
// the runtime's monitor thread, which then polls every 20 µs while the
// process is busy. TLS and WebSocket keep the ordinary calls.
type meteredConn struct {
	net.Conn
	raw      syscall.RawConn // nil unless Conn is a plain TCP socket
	lastRead *atomic.Int64
	budget   *budget
	early    atomic.Int64 // bytes debited when queued, not yet written
}

func newMeteredConn(nc net.Conn, lastRead *atomic.Int64, bg *budget) *meteredConn {
	return &meteredConn{Conn: nc, raw: rawSocket(nc), lastRead: lastRead, budget: bg}
}

// queued debits a publish of n bytes queued for the wire.
func (c *meteredConn) queued(n int) {
	c.budget.wrote(n)
	c.early.Add(int64(n))
}

func (c *meteredConn) Read(p []byte) (int, error) {
	var n int
	var err error
	if c.raw != nil && len(p) > 0 {
		n, err = sockio.Read(c.raw, p, true)
	} else {
		n, err = c.Conn.Read(p)
	}
	if n > 0 {
		c.lastRead.Store(time.Now().UnixNano())
	}
	return n, err
}

func (c *meteredConn) Write(p []byte) (int, error) {
	var n int
	var err error
	if c.raw != nil {
		n, err = sockio.Write(c.raw, p)
	} else {
		n, err = c.Conn.Write(p)
	}
	debit := int64(n)
	for {
		e := c.early.Load()
		take := min(e, debit)
		if c.early.CompareAndSwap(e, e-take) {
			debit -= take
			break
		}
	}
	c.budget.wrote(int(debit))
	return n, err
}

// uplinkEngine is one upstream connection of the session engine.
type uplinkEngine struct {
	*uplink
	e       *session.Engine
	link    *session.Link
	mc      *meteredConn
	v5      bool
	watched chan struct{} // closed when watch has ended
	bo      backoff       // after a temporary refusal (MQTT 5); the acker's only
}

// connectUplinkEngine is connectUplink on the session engine.
func (b *Bridge) connectUplinkEngine(ctx context.Context, u *url.URL) (func(context.Context) error, error) {
	v5 := b.proto != Protocol311
	s, err := b.connectEngine(ctx, u, v5)
	if v5 && errors.Is(err, errV5Refused) && b.proto == ProtocolAuto {
		b.log.Info("upstream refuses MQTT 5; using MQTT 3.1.1 until the bridge restarts", "address", u.Redacted())
		b.proto = Protocol311
		return b.connectUplinkEngine(ctx, u)
	}
	if err != nil {
		return nil, err
	}
	if v5 {
		b.uplinkProto.Store(Protocol5)
	} else {
		b.uplinkProto.Store(Protocol311)
	}
	return func(ctx context.Context) error { return b.serveEngine(ctx, s) }, nil
}

// connectEngine dials u and brings a connection of the engine up,
// subscriptions included.
func (b *Bridge) connectEngine(ctx context.Context, u *url.URL, v5 bool) (*uplinkEngine, error) {
	e, err := b.engineFor(v5, u)
	if err != nil {
		return nil, fmt.Errorf("session engine: %w", err)
	}
	s := &uplinkEngine{uplink: &uplink{b: b, addr: u, lost: make(chan error, 1), engineWatchdog: true}, e: e, v5: v5}
	s.bo = backoff{min: min(retryMin, b.cfg.ReconnectMin), max: b.cfg.ReconnectMax}
	nc, err := b.dialTransport(ctx, u)
	if err != nil {
		return nil, err
	}
	mc := newMeteredConn(nc, &b.lastRead, b.budget)
	if !s.slot.setOther(mc) {
		return nil, fmt.Errorf("dial %s: %w", u.Redacted(), context.Canceled)
	}
	l, err := e.Connect(ctx, mc)
	if err != nil {
		s.slot.close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, session.ErrVersionRefused) {
			if v5 {
				return nil, fmt.Errorf("connect %s: %w", u.Redacted(), errV5Refused)
			}
			if b.flagLevel(u.String()) == 0x84 {
				if !b.refusedFlag(u.String()) {
					return nil, fmt.Errorf("connect %s: the upstream refuses the bridge protocol flag (protocol level 0x84) and bridge_flag is always: %w", u.Redacted(), err)
				}
				return b.connectEngine(ctx, u, v5)
			}
		}
		if errors.Is(err, wire.ErrWriteTimeout) {
			b.writeTimeouts.Add(1)
		}
		return nil, fmt.Errorf("connect %s: %w", u.Redacted(), connackErr(err, v5))
	}
	s.link, s.mc = l, mc
	if v5 {
		b.learned(s.uplink, Upstream{Protocol: Protocol5, MaxQoS: b.maxQoS(l.MaxQoS), RetainAvailable: l.Retain,
			ReceiveMaximum: l.ReceiveMaximum, MaxPacketSize: l.MaxPacketSize}) // upstream.go
	} else {
		b.learned(s.uplink, Upstream{Protocol: Protocol311, BridgeFlag: b.flagLevel(u.String()) == 0x84,
			BridgeFlagRefused: b.flagRefused[u.String()], MaxQoS: b.maxQoS(2), RetainAvailable: true})
	}
	s.watched = make(chan struct{})
	go s.watch()
	if n := l.LostFlows(); n > 0 && !b.cfg.CleanSession {
		b.log.Warn("upstream has no session for the bridge (session present 0): its unfinished flows are sent again as new messages",
			"address", u.Redacted(), "flows", n)
	}
	b.engResumed.Add(uint64(len(l.Resumed())))
	if err := b.subscribeEngine(ctx, s); err != nil {
		s.close()
		sl := &setupLost{err: err}
		if fs := e.Pending(); len(fs) > 0 {
			sl.oldest, sl.held = spool.ID(fs[0].Rec), true
		}
		return nil, sl
	}
	return s, nil
}

// connackErr gives a CONNACK refusal the error paho gives it, so that
// the connect failure's hint (log.go permanentHint) is the same.
func connackErr(err error, v5 bool) error {
	var ce *session.ConnackError
	if !errors.As(err, &ce) {
		return err
	}
	var known error
	switch {
	case ce.Code == 4 && !v5, ce.Code == 0x86 && v5:
		known = packets.ErrorRefusedBadUsernameOrPassword
	case ce.Code == 5 && !v5, ce.Code == 0x87 && v5:
		known = packets.ErrorRefusedNotAuthorised
	case ce.Code == 2 && !v5, ce.Code == 0x85 && v5:
		known = packets.ErrorRefusedIDRejected
	default:
		return err
	}
	return fmt.Errorf("%w: %w", known, err)
}

// watch reports the end of the link to the owner (lost), counting the
// ends the bridge's own checks caused: the engine's ack watchdog and a
// write timeout.
func (s *uplinkEngine) watch() {
	defer close(s.watched)
	<-s.link.Done()
	err := engineEnd(s.link.Err())
	switch {
	case errors.Is(err, session.ErrWatchdog):
		s.b.trips.Add(1)
		s.teardown(err)
	case errors.Is(err, wire.ErrWriteTimeout):
		s.b.writeTimeouts.Add(1)
		s.teardown(fmt.Errorf("write timeout: %w", err))
	case errors.Is(err, session.ErrNoAnswer):
		s.teardown(err)
	}
	select {
	case s.lost <- err:
	default:
	}
}

// engineEnd is a link's end reason as the bridge's: the peer's
// DISCONNECT (MQTT 5) as serverDisconnect, whose reason code names a
// client id collision at once (collision.go), as on the paho path.
func engineEnd(err error) error {
	if de, ok := errors.AsType[*session.DisconnectError](err); ok {
		return &serverDisconnect{rc: de.Code}
	}
	return err
}

// close ends the link and waits for its goroutines and watch.
func (s *uplinkEngine) close() {
	s.slot.close()
	s.link.Close(false)
	<-s.watched
}

// serveEngine runs a connected uplink of the engine until it is lost or
// ctx ends.
func (b *Bridge) serveEngine(ctx context.Context, s *uplinkEngine) error {
	quota, qq := b.cfg.MaxInflightQoS2, sameQoS
	if s.v5 {
		quota, qq = s.link.ReceiveMaximum, quotaQoS
	}
	return b.serveUplink(ctx, uplinkOps{
		s: s.uplink, quota: quota, quotaQoS: qq,
		proto: s,
		drain: s.drain,
		bye:   func() { s.link.Close(true) },
		close: s.close,
	})
}

// drain waits, on a stop, for the flows in flight to end (bounded), as
// the other uplinks' drain does.
func (s *uplinkEngine) drain() {
	fs := s.e.Pending()
	t := time.NewTimer(min(stopDrain, s.b.cfg.AckTimeout))
	defer t.Stop()
	for _, f := range fs {
		select {
		case <-f.Done():
		case <-s.lost:
			return
		case <-t.C:
			s.b.log.Warn("stopping with publishes in flight; they are sent again after the restart", "in_flight", len(s.e.Pending()))
			return
		}
	}
}

// subscribeEngine is subscribeAll for a connection of the engine: the in
// rules (MQTT 5: with No Local, as subscribeAll5, and Retain As
// Published), and the filters a reload removed from a persistent
// session. A reload's change of the in rules applies at the next
// connection.
func (b *Bridge) subscribeEngine(ctx context.Context, s *uplinkEngine) error {
	rl := &b.rl
	rl.subMu.Lock()
	if rl.pending.Load() != nil {
		rl.subMu.Unlock()
		return errReload
	}
	subs := b.c.Load().subscriptions()
	var stale []string
	for f := range rl.stale {
		if _, ok := subs[f]; !ok {
			stale = append(stale, f)
		}
	}
	rl.live, rl.liveEng, rl.have = nil, s, subs
	rl.subMu.Unlock()
	if len(subs) > 0 {
		if err := s.subscribe(ctx, subs); err != nil {
			return fmt.Errorf("subscribe %s: %w", s.addr.Redacted(), err)
		}
	}
	if len(stale) > 0 && !b.cfg.CleanSession {
		slices.Sort(stale)
		if err := s.link.Unsubscribe(ctx, stale); err != nil {
			return fmt.Errorf("unsubscribe %s: %w", s.addr.Redacted(), s.noAnswer(ctx, err))
		}
		rl.subMu.Lock()
		for _, f := range stale {
			delete(rl.stale, f)
		}
		rl.subMu.Unlock()
	}
	return nil
}

// subscribe subscribes filters (MQTT 5: with No Local, the bridge flag of
// 3.1.1, and Retain As Published, so a retained command stays retained
// locally) and returns the filters the SUBACK refused as an error.
func (s *uplinkEngine) subscribe(ctx context.Context, filters map[string]byte) error {
	list := make([]packet.Subscription, 0, len(filters))
	for f, q := range filters {
		list = append(list, packet.Subscription{Filter: f, QoS: q, NoLocal: s.v5, RetainAsPublished: s.v5})
	}
	slices.SortFunc(list, func(a, b packet.Subscription) int { return cmpString(a.Filter, b.Filter) })
	codes, err := s.link.Subscribe(ctx, list)
	if err != nil {
		return s.noAnswer(ctx, err)
	}
	for i, rc := range codes {
		if rc >= 0x80 && i < len(list) {
			err = errors.Join(err, fmt.Errorf("%q refused (0x%02x)", list[i].Filter, byte(rc)))
		}
	}
	return err
}

// syncSubsEngine is syncSubs on the engine's live connection s: add and
// del applied there, within reloadSubWait. Caller holds subMu.
func (b *Bridge) syncSubsEngine(s *uplinkEngine, add map[string]byte, del []string) string {
	ctx, cancel := context.WithTimeout(context.Background(), reloadSubWait)
	defer cancel()
	var err error
	if len(add) > 0 {
		err = s.subscribe(ctx, add)
	}
	if len(del) > 0 && err == nil {
		err = s.link.Unsubscribe(ctx, del)
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Sprintf("sent %d SUBSCRIBE, %d UNSUBSCRIBE; no answer within %s yet", len(add), len(del), reloadSubWait)
	case err != nil:
		// The connection is broken or the upstream refused a filter:
		// the next connection subscribes the rules in force.
		b.markStale(del)
		return fmt.Sprintf("failed (%v); retried at the next connection", err)
	}
	return fmt.Sprintf("subscribed %d, unsubscribed %d on the live connection", len(add), len(del))
}

// noAnswer is err, a failed request, as errNoAnswer when the engine gave
// up waiting for the answer (stuck.go: not the peer's doing), and the
// link's end as the bridge's (engineEnd) when it ended meanwhile.
func (s *uplinkEngine) noAnswer(_ context.Context, err error) error {
	if errors.Is(err, session.ErrNoAnswer) {
		return fmt.Errorf("%w: %w", errNoAnswer, err)
	}
	return engineEnd(err)
}

// resumed returns the flows the engine re-sent on connect, oldest record
// first (protocol).
func (s *uplinkEngine) resumed() []inflight {
	sp := s.b.spool.Load()
	var fs []inflight
	for _, f := range s.link.Resumed() {
		var lane spool.Lane // for a refusal's retry (MQTT 5)
		if m, ok, _ := sp.Get(spool.ID(f.Rec)); ok {
			lane = m.Lane
		}
		fs = append(fs, inflight{id: spool.ID(f.Rec), lane: lane, ef: f, done: f.Done()})
	}
	return fs
}

// room returns a resumed flow's size and QoS (protocol).
func (s *uplinkEngine) room(f inflight) (int, byte) { return f.ef.Size, f.ef.QoS }

// packetSize is m's PUBLISH on this wire, exactly (protocol).
func (s *uplinkEngine) packetSize(m spool.Message) int {
	if s.v5 {
		return publishSize5(m)
	}
	return publishSize311(m)
}

// refuse is uplink311's refuse over 3.1.1 (only max_packet_size is
// known) and uplink5's over 5 (the CONNACK's limits too) (protocol).
func (s *uplinkEngine) refuse(m spool.Message, size int) byte {
	limit := s.b.cfg.MaxPacketSize
	if s.v5 {
		if p := s.link.MaxPacketSize; p > 0 && (limit == 0 || p < limit) {
			limit = p
		}
	}
	switch {
	case limit > 0 && size > limit:
		return rcPacketTooLarge
	case s.v5 && m.QoS > s.link.MaxQoS:
		return rcQoSNotSupported
	case s.v5 && m.Retain && !s.link.Retain:
		return rcRetainNotSupported
	}
	return 0
}

// claim has nothing to do (protocol): the engine takes the record's
// packet id as it publishes, waiting for it if a flow 65535 records
// older or a SUBSCRIBE holds it.
func (s *uplinkEngine) claim(context.Context, *inflight, spool.Message, int) bool { return true }

// publish hands m to the engine (protocol). QoS 0 is complete once
// queued for the wire; a QoS 1/2 flow started stays in the session
// whatever happens to this connection.
func (s *uplinkEngine) publish(ctx context.Context, f *inflight, m spool.Message) (bool, error) {
	fl, err := s.link.Publish(ctx, uint64(f.id), enginePublish(m))
	if err == nil {
		s.mc.queued(f.wire)
	}
	if m.QoS == 0 {
		return err == nil, err
	}
	if fl != nil {
		f.ef, f.done = fl, fl.Done()
	}
	return false, err
}

// finish ends flow f for the acker (protocol): the engine has acked or
// dropped its record already (engineStore); a temporary refusal sends it
// again after a backoff.
func (s *uplinkEngine) finish(f inflight) bool {
	b := s.b
	s.pick.done(f.id) // before a retry takes it again
	rc, reset := f.ef.Result()
	switch {
	case reset:
		// The broker lost the session: the record stays and is sent again.
	case rc >= 0x80 && !permanentRefusal(rc):
		b.upRefused.retried.Add(1)
		b.upRefusedLog.note(b.log, rc)
		s.pick.again(f.id, f.lane, time.Now().Add(s.bo.next()))
	case rc < 0x80:
		s.bo.reset()
	}
	return true
}
