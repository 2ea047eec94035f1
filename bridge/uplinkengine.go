package bridge

// Design note: the uplink on the bridge's own session engine
// (bridge/session). The engine owns packet ids, the flows of both
// directions and their resume after a reconnect, keepalive, the ack
// watchdog and the wire (bridge/wire: write_timeout on every chunk, acks
// and PINGREQ before queued publishes); "acknowledged upstream" is
// decided in one place, session.Engine.acknowledgedUpstream. Its durable
// state is the spool's session log (spool/session.go), and inbound QoS 2
// ids are the gateway's (inbound.go). The send policy is the bridge's:
// the picker (lanes, drain policy, budget), the send window (which also
// keeps QoS 1 out of a 3.1.1 broker's quota while QoS 2 flows hold it),
// the refusals' backoff and the stuck-record hint. The sender hands a
// record to Link.Publish (publish); the acker keeps the send order,
// frees the window and reads the flow's Result (finish).
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
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/edgegw/edgegw/bridge/session"
	"github.com/edgegw/edgegw/bridge/spool"
	"github.com/edgegw/edgegw/bridge/wire"
	"github.com/edgegw/edgegw/gateway/packet"
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
		Inbound: b.inbound, Release: b.release,
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

// errV5Refused is why a connection failed when the broker does not speak
// MQTT 5 (protocol auto then falls back to 3.1.1).
var errV5Refused = errors.New("upstream refuses MQTT 5")

// retryMin is the first backoff after a temporary refusal (at most
// reconnect_min).
const retryMin = 100 * time.Millisecond

// connectUplink connects u with the protocol in force and returns the
// function that serves the connection until it is lost or ctx ends.
// Called by the owner goroutine only (it may change b.proto).
func (b *Bridge) connectUplink(ctx context.Context, u *url.URL) (func(context.Context) error, error) {
	v5 := b.proto != Protocol311
	s, err := b.connectEngine(ctx, u, v5)
	if v5 && errors.Is(err, errV5Refused) && b.proto == ProtocolAuto {
		b.log.Info("upstream refuses MQTT 5; using MQTT 3.1.1 until the bridge restarts", "address", u.Redacted())
		b.proto = Protocol311
		return b.connectUplink(ctx, u)
	}
	if err != nil {
		return nil, err
	}
	if v5 {
		b.uplinkProto.Store(Protocol5)
	} else {
		b.uplinkProto.Store(Protocol311)
	}
	return func(ctx context.Context) error { return b.quotaEnd(s, b.serveUplink(ctx, s)) }, nil
}

// connectEngine dials u and brings a connection of the engine up,
// subscriptions included.
func (b *Bridge) connectEngine(ctx context.Context, u *url.URL, v5 bool) (*uplink, error) {
	e, err := b.engineFor(v5, u)
	if err != nil {
		return nil, fmt.Errorf("session engine: %w", err)
	}
	s := &uplink{b: b, addr: u, lost: make(chan error, 1), e: e, v5: v5}
	s.bo = backoff{min: min(retryMin, b.cfg.ReconnectMin), max: b.cfg.ReconnectMax}
	nc, err := b.dialTransport(ctx, u)
	if err != nil {
		return nil, err
	}
	mc := newMeteredConn(nc, &b.lastRead, b.budget)
	if !s.slot.set(mc) {
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
		b.learned(s, Upstream{Protocol: Protocol5, MaxQoS: b.maxQoS(l.MaxQoS), RetainAvailable: l.Retain,
			ReceiveMaximum: l.ReceiveMaximum, MaxPacketSize: l.MaxPacketSize}) // upstream.go
	} else {
		b.learned(s, Upstream{Protocol: Protocol311, BridgeFlag: b.flagLevel(u.String()) == 0x84,
			BridgeFlagRefused: b.flagRefused[u.String()], MaxQoS: b.maxQoS(2), RetainAvailable: true,
			QoS2Window: e.QoS2Window()})
	}
	s.watched = make(chan struct{})
	go s.watch()
	if n := l.LostFlows(); n > 0 && !b.cfg.CleanSession {
		b.log.Warn("upstream has no session for the bridge (session present 0): its unfinished flows are sent again as new messages",
			"address", u.Redacted(), "flows", n)
	}
	b.engResumed.Add(uint64(len(l.Resumed())))
	if err := b.subscribeAll(ctx, s); err != nil {
		s.close()
		sl := &setupLost{err: b.quotaEnd(s, err)}
		if fs := e.Pending(); len(fs) > 0 {
			sl.oldest, sl.held = spool.ID(fs[0].Rec), true
		}
		return nil, sl
	}
	return s, nil
}

// The CONNACK refusals the connect failure's hint names (log.go
// permanentHint).
var (
	errBadCredentials = errors.New("bad user name or password")
	errNotAuthorized  = errors.New("not authorized")
	errIDRejected     = errors.New("identifier rejected")
)

// connackErr names a CONNACK refusal the connect failure's hint knows
// (log.go permanentHint).
func connackErr(err error, v5 bool) error {
	var ce *session.ConnackError
	if !errors.As(err, &ce) {
		return err
	}
	var known error
	switch {
	case ce.Code == 4 && !v5, ce.Code == 0x86 && v5:
		known = errBadCredentials
	case ce.Code == 5 && !v5, ce.Code == 0x87 && v5:
		known = errNotAuthorized
	case ce.Code == 2 && !v5, ce.Code == 0x85 && v5:
		known = errIDRejected
	default:
		return err
	}
	return fmt.Errorf("%w: %w", known, err)
}

// watch reports the end of the link to the owner (lost), counting the
// ends the bridge's own checks caused: the engine's ack watchdog and a
// write timeout.
func (s *uplink) watch() {
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
// client id collision at once (collision.go).
func engineEnd(err error) error {
	if de, ok := errors.AsType[*session.DisconnectError](err); ok {
		return &serverDisconnect{rc: de.Code}
	}
	return err
}

// close ends the link and waits for its goroutines and watch.
func (s *uplink) close() {
	s.slot.close()
	s.link.Close(false)
	<-s.watched
}

// qos2QuotaEnd is a connection's end reason when the upstream closed it
// with the signature of a QoS 2 quota below what was in flight
// (session/quota.go): not a client id collision (collision.go).
type qos2QuotaEnd struct {
	err     error
	learned int // the window learned at this end (0: not yet)
}

func (e *qos2QuotaEnd) Error() string {
	if e.learned > 0 {
		return fmt.Sprintf("the upstream closed the connection with more QoS 2 messages in flight than it takes; "+
			"sending at most %d at once from now on: %v", e.learned, e.err)
	}
	return fmt.Sprintf("the upstream closed the connection with QoS 2 messages in flight unanswered, "+
		"as a broker does that takes fewer than max_inflight_qos2: %v", e.err)
}

func (e *qos2QuotaEnd) Unwrap() error { return e.err }

// quotaEnd wraps why, the end of s's link (closed), when it ended with
// the quota signature, and says at WARN, once per window learned, what
// the engine learned and which setting avoids it.
func (b *Bridge) quotaEnd(s *uplink, why error) error {
	if s.v5 || !s.link.QuotaEnd() {
		return why
	}
	w := s.link.Learned()
	if w > 0 {
		b.log.Warn("the upstream takes fewer QoS 2 messages in flight than max_inflight_qos2: it closed the connection each time more were sent; "+
			"sending at most qos2_window at once until the bridge restarts (nothing is lost: the others wait in the spool under their packet ids); "+
			"set max_inflight_qos2 to qos2_window or lower to avoid the closed connections",
			"address", s.addr.Redacted(), "qos2_window", w, "max_inflight_qos2", b.cfg.MaxInflightQoS2)
	}
	return &qos2QuotaEnd{err: why, learned: w}
}

// drain waits, on a stop, for the flows in flight to end (bounded).
func (s *uplink) drain() {
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

// subscribeAll subscribes a new connection to the in rules (MQTT 5: with
// No Local and Retain As Published) and unsubscribes the filters a
// reload removed from a persistent session. A reload's change of the in
// rules while this runs applies at the next connection.
func (b *Bridge) subscribeAll(ctx context.Context, s *uplink) error {
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
	rl.live, rl.have = s, subs
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
func (s *uplink) subscribe(ctx context.Context, filters map[string]byte) error {
	list := make([]packet.Subscription, 0, len(filters))
	for f, q := range filters {
		list = append(list, packet.Subscription{Filter: f, QoS: q, NoLocal: s.v5, RetainAsPublished: s.v5})
	}
	slices.SortFunc(list, func(a, b packet.Subscription) int { return strings.Compare(a.Filter, b.Filter) })
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

// syncSubsLive applies add and del on the live connection s, within
// reloadSubWait. Caller holds subMu.
func (b *Bridge) syncSubsLive(s *uplink, add map[string]byte, del []string) string {
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
func (s *uplink) noAnswer(_ context.Context, err error) error {
	if errors.Is(err, session.ErrNoAnswer) {
		return fmt.Errorf("%w: %w", errNoAnswer, err)
	}
	return engineEnd(err)
}

// resumed returns the flows the engine re-sent on connect, oldest record
// first.
func (s *uplink) resumed() []inflight {
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

// room returns a resumed flow's size and QoS.
func (s *uplink) room(f inflight) (int, byte) { return f.ef.Size, f.ef.QoS }

// packetSize is m's PUBLISH on this wire, exactly.
func (s *uplink) packetSize(m spool.Message) int {
	if s.v5 {
		return publishSize5(m)
	}
	return publishSize311(m)
}

// refuse returns the reason code the broker would refuse m, a PUBLISH of
// size bytes (packetSize), with (0: none): such a message is dropped,
// never sent. Over 3.1.1 only max_packet_size is known; over 5 the
// CONNACK's limits too.
func (s *uplink) refuse(m spool.Message, size int) byte {
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

// publish hands m to the engine, which takes the record's packet id as
// it publishes (waiting for it if a flow 65535 records older or a
// SUBSCRIBE holds it). complete: a QoS 0 publish, done once queued for
// the wire; err: the engine did not take it, and the uplink is torn
// down. A QoS 1/2 flow started stays in the session whatever happens to
// this connection.
func (s *uplink) publish(ctx context.Context, f *inflight, m spool.Message) (bool, error) {
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

// finish ends flow f for the acker: the engine has acked or dropped its
// record already (engineStore); a temporary refusal sends it again
// after a backoff.
func (s *uplink) finish(f inflight) {
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
}
