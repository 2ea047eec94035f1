package session

// Design note. The Engine is the uplink's MQTT session: it lives as long
// as the bridge (not one connection) and alone owns the packet ids, the
// in-flight flows of both directions and their window, and what a
// reconnect does with them. A Link is one connection of it (link.go): a
// reader goroutine that handles every packet from the peer, and a timer
// goroutine for keepalive and the ack watchdog; writes go through the
// wire.Conn's writer (bridge/wire).
//
// Packet ids. The PUBLISH carrying spool record r goes out under
// wireID(r), which depends only on the record: a restarted engine re-sends
// an unfinished QoS 2 flow under the id its predecessor used, and the
// broker recognises it. A QoS 2 record whose id is held by another flow
// (65535 records apart, or a SUBSCRIBE) waits for it; a QoS 1 record takes
// the next free id instead (none of its ids needs to survive a restart).
// The engine writes these ids itself: nothing rewrites them on the wire.
//
// Acknowledged upstream is decided in one place, acknowledgedUpstream,
// on the peer's PUBACK or PUBCOMP read from the wire (or, over MQTT 5, a
// PUBACK/PUBREC carrying a refusal); it is where a record leaves the
// spool (Store.Ack, Store.Drop).
//
// Exactly once outbound: the PUBREL of a flow is written only after the
// Store made its PUBREC durable (Store.Released, one fsync for all the
// PUBRECs read in one go), so after a crash the restarted engine re-sends
// a released flow's PUBREL, never its PUBLISH (which a broker that has
// released the id would take as a new message). Inbound: an id is stored
// durably, with the message's routing, before its PUBREC goes out and
// forgotten, durably, before its PUBCOMP: by Config.Inbound and
// Config.Release (the gateway's), not by the engine.

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
)

// Config is an Engine's settings.
type Config struct {
	ClientID   string
	Username   string
	Password   string
	Version    packet.Version // packet.V311 or packet.V5
	BridgeFlag bool           // 3.1.1: protocol level 0x84 (mosquitto's try_private)
	CleanStart bool           // clean session: the peer forgets the session at every connect
	KeepAlive  time.Duration  // 0: none
	// WriteTimeout bounds every write's progress (bridge/wire).
	WriteTimeout time.Duration
	// AckTimeout: the ack watchdog tears a connection down when the
	// oldest unacknowledged publish is older than this and nothing was
	// read since it was sent; also the bound of a SUBSCRIBE's answer.
	AckTimeout time.Duration
	// ConnectTimeout bounds the wait for CONNACK.
	ConnectTimeout time.Duration
	// MaxInflight caps the QoS 1/2 publishes in flight (0: 65535); over
	// MQTT 5 the peer's Receive Maximum caps them too [MQTT-4.9.0-2].
	MaxInflight int
	// MaxInflightQoS2 is the peer's receive quota over MQTT 3.1.1 (0:
	// none), which 3.1.1 cannot announce: a broker refuses flows above it
	// silently (mosquitto's max_inflight_messages, 20 by default, answers
	// 0x97 on a PUBREC or PUBACK, which 3.1.1 cannot carry, and drops the
	// message). A QoS 2 flow holds quota until its PUBREL, a QoS 1 one
	// only while the broker handles it, so the QoS 2 flows in flight are
	// kept one below the quota: a QoS 1 publish always finds room. Over
	// MQTT 5 the Receive Maximum says it and counts both.
	MaxInflightQoS2 int
	// MaxInflightBytes caps the bytes of the publishes in flight (0: none).
	MaxInflightBytes int
	// MaxPacketSize is the largest packet read from the peer (0: any).
	MaxPacketSize int
	// Load returns the PUBLISH of record rec, for a flow a previous
	// process started and this one re-sends (its packet id is set by
	// the engine).
	Load func(rec uint64) (*packet.Publish, error)
	// Permanent reports whether an MQTT 5 refusal (reason code >= 0x80
	// on PUBACK/PUBREC) drops the record (true) or keeps it to be sent
	// again (false). nil: every refusal keeps it.
	Permanent func(rc byte) bool
	// Inbound routes a message from the peer; an error refuses it: it is
	// not acknowledged, and a persistent session re-delivers it. A QoS 2
	// message's packet id is the Inbound function's to keep, durably and
	// with the message's routing, before it returns: dup reports a resend
	// of an id kept and not released (answered, not routed again). The
	// engine keeps no inbound ids of its own: one place (the gateway,
	// gateway.PublishExactlyOnce) knows which were routed.
	Inbound func(p *packet.Publish) (dup bool, err error)
	// Release forgets inbound QoS 2 id (its PUBREL came), durably, before
	// the PUBCOMP goes out; id 0 forgets every id (the peer has no
	// session). An error ends the connection without the PUBCOMP: the
	// peer sends the PUBREL again.
	Release func(id uint16) error
	Logger  *slog.Logger
}

// Engine is the uplink's MQTT session; see the design note above.
type Engine struct {
	cfg   Config
	store Store
	log   *slog.Logger

	mu     sync.Mutex
	byID   map[uint16]*Flow // outbound QoS 1/2 flows by packet id
	byRec  map[uint64]*Flow
	reqs   map[uint16]*request // SUBSCRIBE/UNSUBSCRIBE by packet id
	nextID uint16              // where a QoS 1 publish or a request looks for a free id
	count  int                 // flows in flight
	count2 int                 // QoS 2 flows among them
	bytes  int                 // their size
	// changed is closed (and cleared) when a flow ends or an id frees;
	// made only when someone waits (changedChLocked), not per flow: at a
	// sensor's rate nobody does, and a channel per flow was garbage.
	changed chan struct{}
	link    *Link // the live connection, or nil

	// The QoS 2 window learned from an MQTT 3.1.1 peer (quota.go).
	win2     int     // 0: none learned
	quotaRun int     // connections in a row that ended with the quota signature
	quotaMin int     // the fewest PUBRECs one of them answered
	held     []*Flow // flows of the session not on the wire of the live link, oldest first
}

// Flow is one outbound QoS 1/2 publish of the engine.
type Flow struct {
	Rec  uint64 // the spool record it carries
	ID   uint16 // its packet id
	QoS  byte
	Size int // its PUBLISH's size on the wire

	// Under the engine's mu:
	pub      *packet.Publish // nil for a flow restored from the Store, until loaded
	released bool            // PUBREC received: re-sent as PUBREL
	ending   bool            // acknowledgedUpstream is removing its record
	sent     time.Time       // when it was last queued for the wire (zero: held, not sent on this link)
	link     *Link           // the link it was last sent on

	// Written once before done is closed.
	reason byte
	reset  bool
	done   chan struct{}
}

// Done is closed when the flow ended: the peer answered it, or its
// session was lost (Result).
func (f *Flow) Done() <-chan struct{} { return f.done }

// Result returns how the flow ended, once Done is closed: the reason
// code of the peer's answer (>= 0x80: refused, MQTT 5), or reset: the
// peer had no session any more and the record is to be sent again as a
// new message.
func (f *Flow) Result() (rc byte, reset bool) { return f.reason, f.reset }

// request is a SUBSCRIBE or UNSUBSCRIBE waiting for its answer.
type request struct {
	answer packet.Packet
	done   chan struct{}
}

// New returns an engine on store, with the flows it kept.
func New(cfg Config, store Store) (*Engine, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.WriteTimeout <= 0 || cfg.AckTimeout <= 0 || cfg.ConnectTimeout <= 0 {
		return nil, errors.New("session: WriteTimeout, AckTimeout and ConnectTimeout are required")
	}
	e := &Engine{
		cfg: cfg, store: store, log: cfg.Logger,
		byID: map[uint16]*Flow{}, byRec: map[uint64]*Flow{}, reqs: map[uint16]*request{},
	}
	fs, err := store.Flows()
	if err != nil {
		return nil, fmt.Errorf("session: stored flows: %w", err)
	}
	for _, sf := range fs {
		f := &Flow{Rec: sf.Rec, ID: sf.ID, QoS: 2, released: sf.Released, done: make(chan struct{})}
		if e.byID[f.ID] != nil {
			continue // cannot be: one flow per id; the older one wins
		}
		e.byID[f.ID], e.byRec[f.Rec] = f, f
		e.count++
		e.count2++
	}
	return e, nil
}

// wireID is the packet id of the publish carrying spool record rec: two
// records share one only 65535 records apart.
func wireID(rec uint64) uint16 { return uint16((rec-1)%65535) + 1 }

// freeLocked reports whether packet id id is free. Caller holds mu.
func (e *Engine) freeLocked(id uint16) bool { return e.byID[id] == nil && e.reqs[id] == nil }

// nextFreeLocked returns the next free packet id after e.nextID (0: all
// taken, which the window never allows). Caller holds mu.
func (e *Engine) nextFreeLocked() uint16 {
	for range 65535 {
		e.nextID = e.nextID%65535 + 1
		if e.freeLocked(e.nextID) {
			return e.nextID
		}
	}
	return 0
}

// changedLocked wakes whoever waits for room or an id. Caller holds mu.
func (e *Engine) changedLocked() {
	if e.changed != nil {
		close(e.changed)
		e.changed = nil
	}
}

// changedChLocked returns the channel changedLocked closes next. Caller
// holds mu.
func (e *Engine) changedChLocked() <-chan struct{} {
	if e.changed == nil {
		e.changed = make(chan struct{})
	}
	return e.changed
}

// Pending returns the unfinished flows, oldest record first.
func (e *Engine) Pending() []*Flow {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sortedLocked()
}

func (e *Engine) sortedLocked() []*Flow {
	fs := make([]*Flow, 0, len(e.byRec))
	for _, f := range e.byRec {
		fs = append(fs, f)
	}
	slices.SortFunc(fs, func(a, b *Flow) int { return cmp.Compare(a.Rec, b.Rec) })
	return fs
}

// InFlight returns the publishes in flight and their bytes.
func (e *Engine) InFlight() (count, bytes int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.count, e.bytes
}

// removeLocked takes flow f out of the session and frees its room and
// id. Caller holds mu.
func (e *Engine) removeLocked(f *Flow) bool {
	if e.byRec[f.Rec] != f {
		return false
	}
	delete(e.byRec, f.Rec)
	delete(e.byID, f.ID)
	if i := slices.Index(e.held, f); i >= 0 {
		e.held = slices.Delete(e.held, i, i+1)
	}
	e.count--
	if f.QoS == 2 {
		e.count2--
	}
	e.bytes -= f.Size
	e.changedLocked()
	return true
}

// acknowledgedUpstream is the one place that decides a record was
// acknowledged upstream: the peer answered flow f on the wire with rc (a
// PUBACK, a PUBCOMP, or over MQTT 5 a PUBACK/PUBREC refusing it). Success
// removes the record from the spool (Store.Ack); a permanent refusal
// drops it (Store.Drop); a temporary one keeps it, to be sent again.
// Nothing else removes a record.
//
// The record leaves the spool while its flow is still registered, so a
// sender that asks to publish the record meanwhile gets the flow, never
// a second PUBLISH under an id the peer has just completed.
func (e *Engine) acknowledgedUpstream(f *Flow, rc byte) {
	e.mu.Lock()
	if e.byRec[f.Rec] != f || f.ending {
		e.mu.Unlock()
		return
	}
	f.ending = true
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.removeLocked(f)
		e.mu.Unlock()
		f.reason = rc
		close(f.done)
	}()
	var err error
	switch {
	case rc < 0x80:
		err = e.store.Ack(f.Rec)
	case e.cfg.Permanent != nil && e.cfg.Permanent(rc):
		err = e.store.Drop(f.Rec, rc)
	}
	if err != nil {
		e.log.Error("spool: remove acknowledged record", "id", f.Rec, "err", err)
	}
}

// resetLocked ends every flow without an answer: the peer has no
// session, so their records go again as new messages. Caller holds mu;
// it returns the flows to close.
func (e *Engine) resetLocked() []*Flow {
	fs := e.sortedLocked()
	for _, f := range fs {
		e.removeLocked(f)
		f.reset = true
	}
	return fs
}
