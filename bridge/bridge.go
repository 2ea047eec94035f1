package bridge

// Design note. One goroutine (Run's) owns the uplink: it dials, connects a
// fresh paho client per connection (AutoReconnect off), subscribes the in
// rules, and while connected runs two helpers it joins before the next
// attempt:
//
//   - the sender asks the session's picker (lanes.go) for the next spool
//     message by lane and drain policy (it blocks while there is none to
//     send), waits for room in the send window (window.go:
//     sized by the link with max_inflight auto, within a fixed count
//     otherwise, and for QoS 2 within max_inflight_qos2, the upstream's
//     receive quota, which MQTT 3.1.1 cannot see exceeded), and hands it to
//     paho; after a reconnect it starts again from the oldest
//     unacknowledged message of each lane, so the backlog drains as fast as
//     the window (and, with drain live-first, backlog_share) allows;
//   - the acker waits for the publishes in send order, acks the spool, frees
//     their room in the window (which learns the link from their round
//     trips), and is the ack watchdog: its timer runs only while a publish
//     is in flight (idle costs nothing).
//
// The spool is the source of truth for what is still to be delivered. The
// QoS 1/2 publishes paho has taken are also in the bridge's uplinkStore,
// shared by all its paho clients (store.go): with a persistent upstream
// session paho re-sends them on connect under their original packet ids,
// which is what makes QoS 2 exactly once across reconnects, and the sender
// skips them in the spool. With a clean session the store is emptied on
// connect and the sender re-sends everything from the spool.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edgegw/edgegw/bridge/spool"
	"github.com/edgegw/edgegw/gateway"
)

// Gateway is what a bridge needs from the local broker (gateway.Server
// implements it).
type Gateway interface {
	// Publish routes a message from the cloud locally; it never blocks.
	Publish(m *gateway.Message) error
	// AddSink registers the bridge's spool for local messages matching filter.
	AddSink(name, filter string, sink gateway.Sink) error
	// RemoveSink undoes AddSink.
	RemoveSink(name, filter string)
}

// State is the uplink's state as published on $SYS/bridge/<name>/state.
type State uint8

// The states of a bridge.
const (
	Disconnected State = iota
	Connected
	// Failed: the spool cannot open (full disk, read-only, no permission,
	// a file where its directory should be). The bridge keeps trying to
	// open it; meanwhile its out rules refuse local QoS 1/2 messages, as a
	// full spool does, and nothing goes upstream.
	Failed
)

// String returns the state topic's payload.
func (s State) String() string {
	switch s {
	case Connected:
		return "connected"
	case Failed:
		return "failed"
	}
	return "disconnected"
}

// Stats is a snapshot of a bridge's state and counters.
type Stats struct {
	State     State
	Since     time.Time // when State last changed
	Address   string    // upstream address of the current (or last) connection
	LastError string    // why the uplink last went down or failed to come up

	Connects        uint64 // successful connections (CONNACK + SUBACK)
	Disconnects     uint64 // connections that ended
	ConnectFailures uint64 // dial, TLS, CONNECT or SUBSCRIBE failures
	WatchdogTrips   uint64 // uplinks torn down by the ack watchdog
	WriteTimeouts   uint64 // uplink writes that hit write_timeout

	InFlight      int64         // upstream publishes not yet acknowledged (<= max_inflight)
	InFlightBytes int64         // their size on the wire, about
	Window        int64         // the send window in bytes with max_inflight auto (0: fixed, or not connected)
	MinRTT        time.Duration // the connection's round-trip floor (send to ack), 0 before the first ack
	SpoolMessages int64         // messages waiting for an upstream ack (incl. in flight)
	SpoolBytes    int64         // their topic+payload bytes (bounded by spool max_bytes)
	SpoolDropped  uint64        // messages dropped by the spool's overflow policy

	Sent          uint64 // PUBLISH handed to the uplink (re-sends included)
	Resumed       uint64 // QoS 1/2 flows re-sent after a reconnect under their original packet id
	Acked         uint64 // upstream acknowledgements (PUBACK/PUBCOMP; QoS 0 on write)
	Received      uint64 // inbound messages accepted locally and acked upstream
	InboundFailed uint64 // inbound messages the gateway refused (not acked upstream)
	AcceptFailed  uint64 // local messages the spool could not keep (publisher not acked); logged per burst

	// The byte budget (budget.go), if rate_limit or budget is set.
	BudgetUsed  int64         // bytes written to the uplink in the current period (without a period budget: since the bridge started)
	BudgetLimit int64         // bytes per period (0: no period budget)
	BudgetStart time.Time     // the current period's start (zero: no period budget)
	BudgetEnd   time.Time     // and its end: normal and bulk wait for it once BudgetUsed reaches BudgetLimit
	RateLimit   int64         // bytes per second (0: none)
	RateWaited  time.Duration // how long the sender waited for the rate limit, in all
	// MQTT 5 uplinks (protocol.go, uplink5.go).
	Protocol          string          // of the current (or last) connection: "3.1.1" or "5"
	UpstreamDropped   uint64          // messages the upstream refused for good (PUBACK/PUBREC reason code): dropped, never Acked
	UpstreamDroppedBy map[byte]uint64 // the same by reason code (0x87 not authorized, 0x90 topic name invalid, ...)
	UpstreamRetried   uint64          // temporary refusals (0x97 quota exceeded, ...): the message stays and is sent again
}

// Bridge is one uplink to a cloud broker. Create it with New, run it with
// Run.
type Bridge struct {
	cfg    Config
	c      atomic.Pointer[compiled] // swapped by Reload (reload.go)
	rl     reloadState
	gw     Gateway
	log    *slog.Logger
	origin string

	spool    atomic.Pointer[spool.Spool] // set by Open before the sinks are added
	budget   *budget                     // uplink byte budget (budget.go); set by Open with the spool, nil: none
	store    *uplinkStore                // paho's store, shared by the bridge's successive clients
	openMu   sync.Mutex                  // serialises Open
	tmpDir   string                      // spool dir made by Open when none is configured; removed by Run
	filters  []string                    // local filters registered as sinks by Open
	lastRead atomic.Int64                // unix nanos of the last byte read from upstream
	win      atomic.Pointer[sendWindow]  // the current connection's window, for Stats
	running  atomic.Bool

	protocol uint // 0x84 (bridge flag) or 4; only touched by the owner goroutine
	refusals refusalLog
	failLog  failLog // connect failure lines (log.go); only touched by the owner goroutine

	// MQTT 5 (uplink5.go).
	proto        string    // Protocol311, Protocol5 or ProtocolAuto (until 5 is refused); owner goroutine only
	sess5        *session5 // the MQTT 5 uplink's session state, shared by its clients (session5.go)
	upRefused    refusalCounts
	upRefusedLog refusalLog5
	uplinkProto  atomic.Value // string: the protocol of the current or last connection

	stateMu   sync.Mutex // serialises state changes and their publication
	state     State
	published bool
	addr      string
	lastErr   string
	since     time.Time // when state last changed

	connects, disconnects, connectFailures, trips, writeTimeouts atomic.Uint64
	sent, acked, received, inboundFailed, acceptFailed           atomic.Uint64
	inflight                                                     atomic.Int64
	rejected                                                     [len(rejectReasons)]atomic.Uint64 // by rejectReason
}

// New validates cfg (filling in defaults) and returns a bridge that is not
// yet running.
func New(cfg Config, gw Gateway, log *slog.Logger) (*Bridge, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if gw == nil {
		return nil, errors.New("bridge: nil gateway")
	}
	cfg.setDefaults()
	c, err := cfg.compile()
	if err != nil {
		return nil, err
	}
	setPahoLogger(log)
	b := &Bridge{
		cfg:      cfg,
		gw:       gw,
		log:      log.With("bridge", cfg.Name),
		origin:   gateway.BridgeOrigin(cfg.Name),
		protocol: 0x84,
	}
	b.c.Store(c)
	b.proto = c.proto
	b.store = newUplinkStore(b.completed)
	b.sess5 = newSession5(b.ended5)
	b.refusals = refusalLog{log: b.log, every: refusalLogEvery}
	if cfg.NoBridgeFlag {
		b.protocol = 4
	}
	return b, nil
}

// Name returns the bridge's name.
func (b *Bridge) Name() string { return b.cfg.Name }

// Open opens the spool and registers the out rules with the gateway as
// sinks, so that no local message accepted after Open returns misses the
// spool. The caller (cmd/edgegw) opens every bridge before its listeners
// accept clients; Run opens it if the caller did not.
//
// If the spool cannot open, the bridge is Failed: Open logs the cause,
// publishes "failed" on its state topic and returns the error, and the
// sinks are registered all the same, refusing every message (a local QoS
// 1/2 publisher is not acknowledged). Run keeps trying to open the spool.
// The caller need not stop anything else.
func (b *Bridge) Open() error {
	b.openMu.Lock()
	defer b.openMu.Unlock()
	if b.spool.Load() != nil {
		return nil
	}
	err := b.openSpool()
	if err != nil {
		b.setState(Failed, "", err)
	} else {
		b.setState(Disconnected, "", nil)
	}
	if b.filters == nil {
		b.filters = []string{} // non-nil: the sinks are registered (reload.go)
		for _, r := range b.c.Load().out {
			if err := b.gw.AddSink(b.cfg.Name, r.localFilter, sink{b}); err != nil {
				b.log.Error("add sink", "topic", r.localFilter, "err", err)
				continue
			}
			b.filters = append(b.filters, r.localFilter)
		}
	}
	return err
}

// openSpool opens the spool (in a temporary directory if none is
// configured). Caller holds openMu.
func (b *Bridge) openSpool() error {
	dir, mode := b.cfg.SpoolDir, b.c.Load().sync
	if dir == "" {
		tmp, err := os.MkdirTemp("", "edgegw-bridge-*")
		if err != nil {
			return fmt.Errorf("bridge %s: spool dir: %w", b.cfg.Name, err)
		}
		b.tmpDir = tmp
		dir, mode = tmp, spool.SyncNone
		b.log.Warn("no spool dir: messages bound upstream do not survive a restart")
	}
	sp, err := spool.Open(spool.Options{
		Dir: dir, MaxBytes: b.cfg.SpoolMaxBytes, Sync: mode, SyncInterval: b.cfg.SpoolSyncInterval,
		Logger: b.log,
	})
	if err != nil {
		if b.tmpDir != "" {
			os.RemoveAll(b.tmpDir)
		}
		b.tmpDir = ""
		return fmt.Errorf("bridge %s: open spool: %w", b.cfg.Name, err)
	}
	bg, err := newBudget(b.cfg.RateLimit, b.cfg.BudgetBytes, b.cfg.BudgetPeriod, dir, time.Now)
	if err != nil {
		sp.Close()
		return fmt.Errorf("bridge %s: %w", b.cfg.Name, err)
	}
	b.budget = bg
	b.spool.Store(sp)
	return nil
}

// reopen retries Open with backoff until the spool opens (true) or ctx
// ends (false).
func (b *Bridge) reopen(ctx context.Context) bool {
	bo := backoff{min: b.cfg.ReconnectMin, max: b.cfg.ReconnectMax}
	for {
		t := time.NewTimer(bo.next())
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		if err := b.Open(); err == nil {
			b.log.Info("spool opened; bridge starting")
			return true
		}
	}
}

// Close releases what Open took when Run will not be called (a start that
// failed after the bridge was opened): the sinks, the spool and a temporary
// spool directory. After Run has started, cancelling its ctx is the stop.
func (b *Bridge) Close() error {
	if b.running.Load() {
		return fmt.Errorf("bridge %s: Close while running; cancel Run's context", b.cfg.Name)
	}
	b.openMu.Lock()
	defer b.openMu.Unlock()
	for _, f := range b.filters {
		b.gw.RemoveSink(b.cfg.Name, f)
	}
	b.filters = nil
	sp := b.spool.Load()
	if sp == nil {
		return nil
	}
	err := sp.Close()
	b.spool.Store(nil)
	if b.tmpDir != "" {
		os.RemoveAll(b.tmpDir)
		b.tmpDir = ""
	}
	return err
}

// Run opens the bridge if needed and keeps the uplink connected until ctx
// ends. A spool that cannot open leaves the bridge Failed (see Open) while
// Run retries it with backoff; that is not an error of Run. It returns
// after every goroutine it started has ended, the sinks are removed and
// the spool is closed.
func (b *Bridge) Run(ctx context.Context) error {
	if !b.running.CompareAndSwap(false, true) {
		return fmt.Errorf("bridge %s: Run called twice", b.cfg.Name)
	}
	defer b.removeSinks()
	if err := b.Open(); err != nil && !b.reopen(ctx) {
		return nil
	}
	if b.tmpDir != "" {
		defer os.RemoveAll(b.tmpDir)
	}
	sp := b.spool.Load()

	bctx, stopBudget := context.WithCancel(context.Background())
	budgetDone := make(chan struct{})
	go func() {
		defer close(budgetDone)
		b.budget.keep(bctx, func(err error) { b.log.Warn("budget state not saved", "err", err) })
	}()
	b.loop(ctx)
	stopBudget()
	<-budgetDone

	b.removeSinks()
	b.setState(Disconnected, "", errors.New("stopped"))
	if err := sp.Close(); err != nil {
		return fmt.Errorf("bridge %s: close spool: %w", b.cfg.Name, err)
	}
	return nil
}

// Stats returns a snapshot of the bridge's state and counters.
func (b *Bridge) Stats() Stats {
	b.stateMu.Lock()
	st := Stats{State: b.state, Since: b.since, Address: b.addr, LastError: b.lastErr}
	b.stateMu.Unlock()
	st.Connects = b.connects.Load()
	st.Disconnects = b.disconnects.Load()
	st.ConnectFailures = b.connectFailures.Load()
	st.WatchdogTrips = b.trips.Load()
	st.WriteTimeouts = b.writeTimeouts.Load()
	st.InFlight = b.inflight.Load()
	if w := b.win.Load(); w != nil {
		_, bytes, cwnd, rtt := w.snapshot()
		st.InFlightBytes, st.Window, st.MinRTT = int64(bytes), int64(cwnd), rtt
	}
	st.Sent = b.sent.Load()
	st.Resumed = b.store.resumed.Load() + b.sess5.resumed.Load()
	st.Acked = b.acked.Load()
	st.Received = b.received.Load()
	st.InboundFailed = b.inboundFailed.Load()
	st.AcceptFailed = b.acceptFailed.Load()
	if b.spool.Load() != nil && b.budget != nil {
		bs := b.budget.state()
		st.BudgetUsed, st.BudgetStart, st.BudgetEnd, st.RateWaited = bs.used, bs.start, bs.end, bs.waited
		st.BudgetLimit, st.RateLimit = b.budget.limit, int64(b.budget.rate)
	}
	st.Protocol, _ = b.uplinkProto.Load().(string)
	st.UpstreamDroppedBy, st.UpstreamDropped = b.upRefused.droppedByReason()
	st.UpstreamRetried = b.upRefused.retried.Load()
	if sp := b.spool.Load(); sp != nil {
		ss := sp.Stats()
		st.SpoolMessages, st.SpoolBytes = ss.Messages, ss.Bytes
		for _, n := range ss.Dropped {
			st.SpoolDropped += n
		}
	}
	return st
}

// StateTopic returns the local retained topic carrying the bridge's state.
func (b *Bridge) StateTopic() string { return b.c.Load().stateTop }

// setState records s and publishes it (retained, locally) if it changed.
// Any goroutine may call it: a write timeout or watchdog trip reports
// "disconnected" at once, before the owner has noticed.
func (b *Bridge) setState(s State, addr string, why error) {
	b.stateMu.Lock()
	defer b.stateMu.Unlock()
	if addr != "" {
		b.addr = addr
	}
	if why != nil {
		b.lastErr = why.Error()
	}
	if b.published && b.state == s {
		return
	}
	b.state, b.published = s, true
	b.since = time.Now()
	switch {
	case s == Connected:
		b.log.Info("uplink connected", "address", b.addr)
	case s == Failed:
		b.log.Error("bridge failed: its spool cannot open; messages for it are refused, the rest of the gateway runs", "err", why)
	case why != nil:
		b.log.Warn("uplink disconnected", "address", b.addr, "reason", why)
	}
	err := b.gw.Publish(&gateway.Message{
		Topic: b.c.Load().stateTop, Payload: []byte(s.String()), QoS: 1, Retain: true, Origin: b.origin,
	})
	if err != nil {
		b.log.Error("publish state", "err", err)
	}
}

// completed removes a record from the spool once upstream acknowledged it
// (PUBACK, PUBCOMP, or a QoS 0 write).
func (b *Bridge) completed(id spool.ID) {
	if err := b.spool.Load().Ack(id); err != nil {
		b.log.Error("spool ack", "id", uint64(id), "err", err)
	}
	b.acked.Add(1)
}

// sink is the bridge's spool as seen by the gateway: a gateway.AsyncSink.
type sink struct{ b *Bridge }

var _ gateway.AsyncSink = sink{}

// spoolMessage maps m through the out rules; ok is false if the bridge
// does not take it (its own message coming back, or no out rule matches).
func (k sink) spoolMessage(m *gateway.Message) (sm spool.Message, ok bool) {
	b := k.b
	if m.Origin == b.origin { // loop prevention (the gateway checks it too)
		return sm, false
	}
	r := b.c.Load().outRule(m.Topic)
	if r == nil {
		return sm, false
	}
	return spoolMessageFor(m, r, time.Now()), true
}

// errNoSpool is why a Failed bridge refuses a local message.
var errNoSpool = errors.New("spool not open")

// spoolOrErr returns the open spool, or an error saying why there is none.
func (k sink) spoolOrErr() (*spool.Spool, error) {
	if sp := k.b.spool.Load(); sp != nil {
		return sp, nil
	}
	k.b.stateMu.Lock()
	defer k.b.stateMu.Unlock()
	return nil, fmt.Errorf("%w: %s", errNoSpool, k.b.lastErr)
}

// refused counts, logs (rate-limited) and wraps an error of the spool
// about local topic.
func (k sink) refused(topic string, err error) error {
	k.b.acceptFailed.Add(1)
	k.b.rejected[rejectReason(err)].Add(1)
	err = fmt.Errorf("bridge %s: spool %q: %w", k.b.cfg.Name, topic, err)
	k.b.refusals.refused(topic, err)
	return err
}

// Accept maps m through the out rules and appends it to the spool; it
// returns once the message is durable (group commit), before the local
// publisher is acknowledged. The gateway uses AcceptAsync; Accept is for
// callers that want to block.
//
// A QoS 0 message is written at once (in order) but not waited for: no
// acknowledgement depends on it, and the gateway hands local QoS 0
// publishes to Accept on the publisher's reader, which must not stall for
// a commit window per message (nor leave its PINGREQs unanswered).
func (k sink) Accept(m *gateway.Message) error {
	sm, ok := k.spoolMessage(m)
	if !ok {
		return nil
	}
	sp, err := k.spoolOrErr()
	if err != nil {
		return k.refused(m.Topic, err)
	}
	if m.QoS == 0 {
		topic := m.Topic
		sp.AppendAsync(sm, func(_ spool.ID, err error) {
			if err != nil {
				k.refused(topic, err)
			} else {
				k.b.refusals.kept()
			}
		})
		return nil
	}
	if _, err := sp.Append(context.Background(), sm); err != nil {
		return k.refused(m.Topic, err)
	}
	k.b.refusals.kept()
	return nil
}

// AcceptAsync maps m through the out rules and writes it to the spool
// before it returns (so messages keep the order of the calls), without
// waiting for the fsync; done reports when the group commit covering it
// made it durable, or why it could not be kept. The gateway sends the
// publisher's PUBACK/PUBREC from done, so a local connection is not held to
// one message per commit window and its PINGREQs do not wait behind it.
// done is called exactly once, possibly before AcceptAsync returns; the
// spool's Close completes every pending done.
func (k sink) AcceptAsync(m *gateway.Message, done func(error)) {
	sm, ok := k.spoolMessage(m)
	if !ok {
		done(nil)
		return
	}
	sp, err := k.spoolOrErr()
	if err != nil {
		done(k.refused(m.Topic, err))
		return
	}
	topic := m.Topic // not m: the payload need not live until the commit
	sp.AppendAsync(sm, func(_ spool.ID, err error) {
		if err != nil {
			err = k.refused(topic, err)
		} else {
			k.b.refusals.kept()
		}
		done(err)
	})
}

// inbound is paho's handler for every message from upstream (called in
// order on paho's router goroutine). The upstream ack is sent only after
// the gateway took the message; a refused message stays unacknowledged
// and a persistent upstream session redelivers it after a reconnect.
func (b *Bridge) inbound(_ mqtt.Client, m mqtt.Message) {
	local, ok := b.c.Load().inTopic(m.Topic())
	if !ok {
		b.log.Warn("inbound message matches no in rule; dropped", "topic", m.Topic())
		m.Ack()
		return
	}
	err := b.gw.Publish(&gateway.Message{
		Topic: local, Payload: m.Payload(), QoS: m.Qos(), Retain: m.Retained(), Origin: b.origin,
	})
	if err != nil {
		b.inboundFailed.Add(1)
		b.log.Warn("inbound message refused locally; not acked upstream", "topic", local, "err", err)
		return
	}
	m.Ack()
	b.received.Add(1)
}

// backoff is capped exponential backoff with jitter.
type backoff struct{ min, max, cur time.Duration }

func (bo *backoff) reset() { bo.cur = 0 }

// next returns a wait in [cur/2, cur] (at least min), doubling cur up to
// max each call.
func (bo *backoff) next() time.Duration {
	if bo.cur == 0 {
		bo.cur = bo.min
	} else {
		bo.cur = min(bo.cur*2, bo.max)
	}
	d := bo.cur/2 + rand.N(bo.cur/2+1)
	return max(d, bo.min)
}

// loop is the owner goroutine's reconnect loop: each round tries the
// addresses in order, serves the first that connects until it is lost,
// then waits a jittered backoff (reset after every successful connection).
func (b *Bridge) loop(ctx context.Context) {
	bo := backoff{min: b.cfg.ReconnectMin, max: b.cfg.ReconnectMax}
	for ctx.Err() == nil {
		b.applyPending()
		for _, u := range b.c.Load().addrs {
			serve, err := b.connectUplink(ctx, u) // uplink5.go: by protocol
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, errReload) {
				break // apply the new settings first
			}
			if err != nil {
				b.connectFailed(u, err)
				continue
			}
			bo.reset()
			b.failLog.connected(b.log, time.Now())
			serve(ctx)
			break
		}
		t := time.NewTimer(bo.next())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// session is one upstream connection.
type session struct {
	b      *Bridge
	addr   *url.URL
	client mqtt.Client
	slot   connSlot
	lost   chan error // paho's connection-lost report; capacity 1
	pick   *picker    // what to send next (lanes.go); set by serve

	causeMu sync.Mutex
	cause   error // first reason the bridge itself gave for tearing down
}

// setCause records why the bridge tears the session down (first wins).
func (s *session) setCause(why error) {
	s.causeMu.Lock()
	if s.cause == nil {
		s.cause = why
	}
	s.causeMu.Unlock()
}

func (s *session) getCause() error {
	s.causeMu.Lock()
	defer s.causeMu.Unlock()
	return s.cause
}

// teardown reports the uplink down at once and closes its socket; paho's
// reader then fails and reports the connection lost to the owner.
func (s *session) teardown(why error) {
	s.setCause(why)
	s.b.setState(Disconnected, "", why)
	s.slot.close()
}

// waitLost closes the socket and waits (bounded) until paho has stopped
// its workers and reported the loss.
func (s *session) waitLost() {
	s.slot.close()
	t := time.NewTimer(s.b.cfg.WriteTimeout + s.b.cfg.ConnectTimeout)
	defer t.Stop()
	select {
	case <-s.lost:
	case <-t.C:
	}
}

// connect dials u and brings an MQTT session up, subscriptions included.
func (b *Bridge) connect(ctx context.Context, u *url.URL) (*session, error) {
	s := &session{b: b, addr: u, lost: make(chan error, 1)}
	onTimeout := func(err error) {
		b.writeTimeouts.Add(1)
		why := fmt.Errorf("write timeout: %w", err)
		s.setCause(why)
		b.setState(Disconnected, "", why)
	}
	o := mqtt.NewClientOptions().
		AddBroker(u.String()).
		SetClientID(b.cfg.ClientID).
		SetUsername(b.cfg.Username).
		SetPassword(b.cfg.Password).
		SetCleanSession(b.cfg.CleanSession).
		SetProtocolVersion(b.protocol).
		SetKeepAlive(b.cfg.KeepAlive).
		SetPingTimeout(b.cfg.WriteTimeout). // no PINGRESP within keepalive + write_timeout = dead
		SetConnectTimeout(b.cfg.ConnectTimeout).
		SetWriteTimeout(b.cfg.WriteTimeout). // bounds paho's hand-off of a PUBLISH to its writer
		SetAutoReconnect(false).             // the owner goroutine reconnects
		SetConnectRetry(false).
		SetStore(b.store). // outlives the client: paho re-sends from it on a persistent session
		SetOrderMatters(true).
		SetAutoAckDisabled(true). // inbound acked after gateway.Publish
		SetResumeSubs(false).
		SetDefaultPublishHandler(b.inbound).
		SetConnectionLostHandler(func(_ mqtt.Client, err error) {
			select {
			case s.lost <- err:
			default:
			}
		}).
		SetCustomOpenConnectionFn(func(uri *url.URL, _ mqtt.ClientOptions) (net.Conn, error) {
			return b.dial(ctx, uri, b.store, &s.slot, onTimeout)
		})
	s.client = mqtt.NewClient(o)
	tok := s.client.Connect()
	select {
	case <-tok.Done():
	case <-ctx.Done():
		s.slot.close()
		<-tok.Done() // bounded: the socket is closed, the dial honours ctx
		if tok.Error() == nil {
			s.client.Disconnect(0)
		}
		return nil, ctx.Err()
	}
	if err := tok.Error(); err != nil {
		s.slot.close() // paho closes it too; this also ends its writer
		if ct, ok := tok.(*mqtt.ConnectToken); ok && ct.ReturnCode() == packets.ErrRefusedBadProtocolVersion && b.protocol != 4 {
			b.log.Info("upstream refuses the bridge protocol flag; using plain MQTT 3.1.1", "address", u.Redacted())
			b.protocol = 4
			return b.connect(ctx, u)
		}
		return nil, fmt.Errorf("connect %s: %w", u.Redacted(), err)
	}
	// paho has re-sent the stored publishes; the PUBRELs among them hold
	// packet ids paho does not reserve, so they must complete before any
	// new SUBSCRIBE or PUBLISH takes an id (store.go).
	if rels := b.store.pendingPubrels(); len(rels) > 0 {
		if err := waitAll(ctx, rels, b.cfg.AckTimeout); err != nil {
			s.waitLost()
			return nil, fmt.Errorf("complete %d PUBREL re-sent to %s: %w", len(rels), u.Redacted(), err)
		}
	}
	if err := b.subscribeAll(ctx, s); err != nil { // reload.go
		s.waitLost()
		return nil, err
	}
	return s, nil
}

// waitToken waits for t within d or until ctx ends.
func waitToken(ctx context.Context, t mqtt.Token, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-t.Done():
		return t.Error()
	case <-timer.C:
		return fmt.Errorf("no answer within %s", d)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitAll waits until every channel in chs is closed, within d or until
// ctx ends.
func waitAll(ctx context.Context, chs []<-chan struct{}, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for _, ch := range chs {
		select {
		case <-ch:
		case <-timer.C:
			return fmt.Errorf("no answer within %s", d)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// inflight is a publish handed to paho and not yet acknowledged.
type inflight struct {
	id  spool.ID
	tok mqtt.Token // nil for a publish paho re-sent from the store on connect
	out *outbound  // its store entry (QoS 1/2); nil for QoS 0 or if paho refused it
	st  stamp      // its room in the send window: size, QoS, send time
}

// windowLimits returns the count cap of the send window and whether it is
// sized by the link (max_inflight auto).
func (b *Bridge) windowLimits() (maxCount int, auto bool) {
	if b.cfg.MaxInflight == MaxInflightAuto {
		return autoMaxCount, true
	}
	return b.cfg.MaxInflight, false
}

// serve runs a connected session until it is lost or ctx ends.
func (b *Bridge) serve(ctx context.Context, s *session) {
	b.serveUplink(ctx, uplinkOps{
		s: s, quota: b.cfg.MaxInflightQoS2, quotaQoS: sameQoS,
		loops: func(win *sendWindow, maxCount int) (send, ack func(context.Context)) {
			pending := make(chan inflight, maxCount) // never blocks: the window's count bounds it
			return func(ctx context.Context) { s.send(ctx, win, pending) }, func(ctx context.Context) { s.ack(ctx, win, pending) }
		},
		drain: s.drain,
		bye:   func() { s.client.Disconnect(250) },
		close: s.slot.close,
	})
}

// uplinkOps is what serveUplink needs of one upstream connection, over
// MQTT 3.1.1 (serve) or MQTT 5 (serve5).
type uplinkOps struct {
	s        *session
	quota    int             // the QoS 2 window: max_inflight_qos2, or the broker's Receive Maximum
	quotaQoS func(byte) byte // the QoS under which a publish takes room in the window
	// loops returns the sender and the acker of the connection.
	loops func(win *sendWindow, maxCount int) (send, ack func(context.Context))
	drain func() // on a stop: wait (bounded) for the publishes in flight
	bye   func() // on a stop: a polite DISCONNECT
	close func() // close the socket; return once the client let go of it
}

// serveUplink runs a connected upstream connection until it is lost or
// ctx ends: its send window and picker, its sender and acker, and on the
// way out the stop's drain and the state change.
func (b *Bridge) serveUplink(ctx context.Context, u uplinkOps) {
	s := u.s
	b.lastRead.Store(time.Now().UnixNano())
	b.connects.Add(1)
	b.setState(Connected, s.addr.Redacted(), nil)

	sctx, cancel := context.WithCancel(ctx)
	maxCount, auto := b.windowLimits()
	win := newSendWindow(maxCount, u.quota, auto, time.Now())
	b.win.Store(win)
	s.pick = newPicker(b.spool.Load(), b.cfg.Drain, b.cfg.BacklogShare, win, u.quotaQoS) // lanes.go
	s.pick.budget = b.budget
	send, ack := u.loops(win, maxCount)
	var wg sync.WaitGroup
	wg.Add(2)
	senderDone := make(chan struct{})
	go func() { defer wg.Done(); defer close(senderDone); send(sctx) }()
	go func() { defer wg.Done(); ack(sctx) }()

	var why error
	select {
	case why = <-s.lost:
	case <-ctx.Done():
		why = errors.New("stopped")
		<-senderDone // it stops with ctx; nothing new is sent
		u.drain()
	}
	if c := s.getCause(); c != nil {
		why = c
	}
	cancel()
	if ctx.Err() != nil {
		u.bye() // the socket is closed below anyway
	}
	u.close()
	wg.Wait()
	b.inflight.Store(0)
	b.win.Store(nil)
	b.disconnects.Add(1)
	b.setState(Disconnected, "", why)
}

// stopDrain bounds how long a stopping bridge waits for its in-flight
// publishes (never more than ack_timeout).
const stopDrain = 2 * time.Second

// drain waits, on a stop, for the QoS 1/2 publishes in flight to complete
// (their completion acks the spool through the store), so that a restart
// does not send them again under new packet ids: the in-process store does
// not survive the process. It gives up after stopDrain or when the uplink
// is lost.
func (s *session) drain() {
	chs := s.b.store.doneChans()
	if len(chs) == 0 {
		return
	}
	t := time.NewTimer(min(stopDrain, s.b.cfg.AckTimeout))
	defer t.Stop()
	for _, ch := range chs {
		select {
		case <-ch:
		case <-s.lost:
			return
		case <-t.C:
			s.b.log.Warn("stopping with publishes in flight; they are sent again after the restart", "in_flight", s.b.store.len())
			return
		}
	}
}

// send is the session's sender: it keeps spool messages in flight as
// the send window allows (window.go), in the picker's order (lanes.go),
// starting from the oldest unacked ones. A message waits for room in its turn (order is
// kept): a QoS 2 message for a slot of max_inflight_qos2 too. The
// publishes paho re-sent on connect come first: they hold room and are
// not sent again.
func (s *session) send(ctx context.Context, win *sendWindow, pending chan<- inflight) {
	b := s.b
	now := time.Now()
	for _, e := range b.store.pending() {
		// A resumed QoS 2 flow still holds the broker's quota. These are
		// on the wire already: they take room whether it is there or not
		// (never more than the caps: they were in flight under them).
		qos := byte(1)
		if b.store.isQoS2(e) {
			qos = 2
		}
		st := win.add(b.store.wireSize(e), qos, now)
		s.pick.resume(e.rec, st)
		b.inflight.Add(1)
		b.sent.Add(1)
		pending <- inflight{id: e.rec, out: e, st: st}
	}
	for {
		id, m, err := s.pick.next(ctx) // by lane and drain policy (lanes.go)
		if err != nil {
			if ctx.Err() == nil {
				s.teardown(fmt.Errorf("spool: %w", err))
			}
			return
		}
		// For QoS 2 the window holds the upstream's receive quota too;
		// over 3.1.1 a refusal is invisible.
		st, ok := win.acquire(ctx, publishSize(m.Topic, len(m.Payload)), m.QoS)
		if !ok {
			return
		}
		var out *outbound
		if m.QoS > 0 {
			if busy := b.store.wireBusy(id); busy != nil {
				select { // a record 65535 older holds the wire id
				case <-busy:
				case <-ctx.Done():
					return
				}
			}
			out = b.store.announce(id)
		}
		b.inflight.Add(1)
		st.sent = time.Now()
		tok := s.client.Publish(m.Topic, m.QoS, m.Retain, m.Payload)
		if out != nil && !b.store.taken(out) {
			out = nil // refused by paho: its token carries the error
		}
		b.sent.Add(1)
		pending <- inflight{id: id, tok: tok, out: out, st: st}
	}
}

// ack is the session's acker and ack watchdog: it waits for publishes in
// send order (acknowledgements come in that order; 5.0 §4.6 requires
// it of clients, [MQTT-4.6.0-2]), frees their
// window slots, and tears the uplink down if the oldest one is older than
// ack_timeout with nothing read from upstream since it was sent.
func (s *session) ack(ctx context.Context, win *sendWindow, pending <-chan inflight) {
	b := s.b
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		var f inflight
		select {
		case f = <-pending:
		case <-ctx.Done():
			return
		}
		timer.Reset(time.Until(f.st.sent.Add(b.cfg.AckTimeout)))
		// A QoS 1/2 publish is complete when paho deletes it from the
		// store (PUBACK/PUBCOMP); its token, if any, reports a failure to
		// send it. A QoS 0 publish is complete when its token is.
		var tokDone, stored <-chan struct{}
		if f.tok != nil {
			tokDone = f.tok.Done()
		}
		if f.out != nil {
			stored = f.out.done
		}
	wait:
		for {
			select {
			case <-stored:
				timer.Stop()
				break wait
			case <-tokDone:
				if err := f.tok.Error(); err != nil {
					s.teardown(fmt.Errorf("publish: %w", err))
					return
				}
				if stored == nil {
					timer.Stop()
					break wait
				}
				tokDone = nil // acked; paho's Del came first or follows at once
			case <-timer.C:
				if b.lastRead.Load() < f.st.sent.UnixNano() {
					b.trips.Add(1)
					s.teardown(fmt.Errorf("ack watchdog: no ack for %s and nothing from upstream", b.cfg.AckTimeout))
					return
				}
				timer.Reset(b.cfg.AckTimeout)
			case <-ctx.Done():
				return
			}
		}
		// Only a PUBACK/PUBCOMP read from the wire completes a QoS 1/2
		// record (the store's Del): a paho token can complete without one
		// (resume's claimID, TestTokenCompletedByResumeIsNotAnAck).
		if f.out == nil {
			if f.st.qos > 0 { // paho refused it without an error: never the case in 1.5.1
				s.teardown(fmt.Errorf("publish of record %d completed without being stored", f.id))
				return
			}
			b.completed(f.id) // QoS 0: complete once written
		}
		s.pick.done(f.id)
		b.inflight.Add(-1)
		win.release(f.st, time.Now())
	}
}
