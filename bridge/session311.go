package bridge

// Design note: exactly once across reconnects. MQTT makes a QoS 2 publish
// exactly once only if, after a lost connection, the client re-sends it in
// the same upstream session under the same packet id: the PUBLISH again
// (DUP) if no PUBREC came back, the PUBREL once one did. A new packet id
// makes it a new message to the broker, delivered twice if the first copy
// got through.
//
// paho assigns packet ids and re-sends with them only from its Store, on
// connect, when the session is persistent (resume). So the bridge gives
// every paho client it makes the same uplinkStore, which lives as long as
// the bridge: paho puts each QoS 1/2 PUBLISH into it as it hands it to the
// socket and deletes it at the PUBACK/PUBCOMP, and the next client re-sends
// what is left, oldest first, with the original ids. The store tells the
// bridge which spool record each entry is (the sender announces it just
// before Publish, which calls Put synchronously), and Del is the signal
// that the record may leave the spool: Del acks it there itself, because
// a flow may complete while no session's acker is watching (a PUBREL
// re-sent during connect, say).
//
// paho 1.5.1 never replaces a stored PUBLISH by its PUBREL, so it would
// re-send the PUBLISH after a PUBREC, which a broker that already released
// the id takes as a new message. The bridge's connection reader sees every
// PUBREC go by (ackRewriter) and turns the entry into a PUBREL first.
//
// The ids paho assigns are not the ones on the wire: see wireid.go.
//
// paho re-sends a stored PUBREL without reserving its packet id, so until
// those PUBRELs are complete a new publish or subscribe could get the same
// id; connect waits for them (pendingPubrels) before it subscribes or the
// sender starts.

import (
	"cmp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edgegw/edgegw/bridge/spool"
)

// outbound is one upstream QoS 1/2 publish that paho has taken and the
// broker has not completed.
type outbound struct {
	rec  spool.ID // the spool record it carries
	pid  uint16   // paho's packet id; 0 until paho stored it
	wire uint16   // the packet id on the wire: pickWireID's
	// ended: the flow of a direct publish completed (completeDirect),
	// its record acked; set under the store's mu, read by the acker
	// without it.
	ended atomic.Bool
	pkt   packets.ControlPacket
	// done is closed by Del (PUBACK or PUBCOMP arrived) or
	// completeDirect. A direct publish makes it only when something
	// other than its acker waits for it (doneLocked): its acker waits on
	// the store's directEnded and ended instead, so a reading costs no
	// channel (issue 16).
	done chan struct{}
	// written is closed (and wrote set, under the store's mu) when the
	// PUBLISH paho holds for it passed the connection's Write
	// (markWritten), or its flow completed (Del: the reader may see the
	// ack first): a publish the bridge writes itself must not
	// overtake it (direct.go). Set before paho sees the entry (announce,
	// All), not changed while a sender runs.
	written chan struct{}
	wrote   bool
	// direct: a QoS 1 publish the bridge wrote itself (direct.go), with
	// the message it carries; paho does not know it (pid 0) until a
	// resumed session hands it to paho to re-send (adoptDirectLocked).
	direct bool
	msg    directMsg
}

// directMsg is what paho needs of a direct publish to re-send it
// (adoptDirectLocked).
type directMsg struct {
	topic   string
	payload []byte
	retain  bool
}

// doneLocked returns e's done, made if it was not (closed if its flow
// ended). Caller holds the store's mu.
func (e *outbound) doneLocked() chan struct{} {
	if e.done == nil {
		e.done = make(chan struct{})
		if e.ended.Load() { // completeDirect found none to close
			close(e.done)
		}
	}
	return e.done
}

// released reports whether the broker sent PUBREC for it (it is a PUBREL
// now). Caller holds the store's mu.
func (e *outbound) released() bool {
	_, ok := e.pkt.(*packets.PubrelPacket)
	return ok
}

// uplinkStore is the bridge's paho Store, shared by its successive
// clients; see the design note above. Its methods are safe for concurrent
// use: paho calls them from the sender (Publish) and its own goroutines.
type uplinkStore struct {
	complete func(rec spool.ID) // called by Del, outside mu, when a flow completed
	// directEnded (capacity 1) wakes the acker when a direct publish
	// ended (completeDirect): it then looks at its flow's ended. One for
	// every publish, in place of a channel each. It relies on one acker
	// at a time (serveUplink waits for a connection's sender and acker
	// before the next connection starts): two would take each other's
	// wake-ups.
	directEnded chan struct{}
	resumed     atomic.Uint64 // outbound entries handed to paho's resume (All)

	mu       sync.Mutex
	next     *outbound            // the publish the sender is handing to paho
	wireNext uint16               // where pickWireID looks for a free id
	out      map[uint16]*outbound // by paho's packet id
	wire     map[uint16]*outbound // by wire packet id
	reqs     map[uint16]*request  // SUBSCRIBE/UNSUBSCRIBE by wire id (requestid.go)
	reqNext  uint16               // where requestWire looks for a free id
	picked   uint16               // the id pickWire gave, until announce registers it (requestid.go)
	in       map[string]packets.ControlPacket
	// releaseIn forgets an inbound QoS 2 id durably (PUBREL), or all (0:
	// no session upstream); called outside mu (inbound.go).
	releaseIn func(id uint16)
	// noSession: the current connection's CONNACK said the broker has no
	// session for the bridge (session present 0), so All resumes nothing;
	// lostFlows is how many flows it dropped for that (takeLostFlows).
	noSession bool
	lostFlows int
}

var _ mqtt.Store = (*uplinkStore)(nil)

func newUplinkStore(complete func(rec spool.ID)) *uplinkStore {
	return &uplinkStore{
		complete:    complete,
		directEnded: make(chan struct{}, 1),
		out:         make(map[uint16]*outbound),
		wire:        make(map[uint16]*outbound),
		reqs:        make(map[uint16]*request),
		in:          make(map[string]packets.ControlPacket),
	}
}

// announce tells the store that the next PUBLISH paho stores carries
// spool record rec, under wire id wire (pickWire); the sender calls it
// just before Publish.
func (s *uplinkStore) announce(rec spool.ID, wire uint16) *outbound {
	e := &outbound{rec: rec, wire: wire, done: make(chan struct{}), written: make(chan struct{})}
	s.mu.Lock()
	s.next, s.picked = e, 0
	s.mu.Unlock()
	return e
}

// taken ends an announcement after Publish returned and reports whether
// paho stored the publish (it does not when it refuses it outright, e.g.
// not connected).
func (s *uplinkStore) taken(e *outbound) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next == e {
		s.next = nil
	}
	return e.pid != 0
}

// pickWire returns the wire id for a publish of record rec at qos
// (pickWireID), or 0 and a channel to wait on. Only the sender calls it,
// and announce follows before anything else takes an id.
func (s *uplinkStore) pickWire(rec spool.ID, qos byte) (uint16, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, wait := pickWireID(rec, qos, &s.wireNext, func(w uint16) <-chan struct{} {
		if e := s.wire[w]; e != nil {
			return e.doneLocked()
		}
		if r := s.reqs[w]; r != nil { // a SUBSCRIBE's (requestid.go)
			return r.done
		}
		return nil
	}, func(w uint16) bool { return s.wire[w] == nil && s.reqs[w] == nil })
	s.picked = w // a SUBSCRIBE written before announce must not take it
	return w, wait
}

// wireOf returns the wire id of paho's packet id pid (0 if unknown).
func (s *uplinkStore) wireOf(pid uint16) uint16 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.out[pid]; e != nil {
		return e.wire
	}
	return 0
}

// pahoOf returns paho's packet id for an ack of wire id w (0 if unknown).
// A PUBREC also records that the broker has the message: from now on a
// re-send is the PUBREL, never the PUBLISH again.
func (s *uplinkStore) pahoOf(w uint16, pubrec bool) uint16 {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.wire[w]
	if e == nil {
		return 0
	}
	if pubrec && !e.released() {
		rel := packets.NewControlPacket(packets.Pubrel).(*packets.PubrelPacket)
		rel.MessageID = e.pid
		e.pkt = rel
	}
	return e.pid
}

// isQoS2 reports whether e is a QoS 2 flow (a PUBLISH at QoS 2 or the
// PUBREL that followed its PUBREC).
func (s *uplinkStore) isQoS2(e *outbound) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch p := e.pkt.(type) {
	case *packets.PublishPacket:
		return p.Qos == 2
	case *packets.PubrelPacket:
		return true
	}
	return false
}

// wireSize returns the size on the wire of e's stored packet, about (for
// the send window).
func (s *uplinkStore) wireSize(e *outbound) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := e.pkt.(*packets.PublishPacket); ok {
		return publishSize(p.TopicName, len(p.Payload))
	}
	return 4 // PUBREL
}

// pending returns the publishes not yet completed, oldest first: after a
// connect, paho has just re-sent them in that order.
func (s *uplinkStore) pending() []*outbound {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sortedLocked()
}

// pendingPubrels returns the completion channels of the stored PUBRELs.
func (s *uplinkStore) pendingPubrels() []<-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	var chs []<-chan struct{}
	for _, e := range s.out {
		if e.released() {
			chs = append(chs, e.doneLocked())
		}
	}
	return chs
}

// doneChans returns the completion channels of the publishes not yet
// completed.
func (s *uplinkStore) doneChans() []<-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	chs := make([]<-chan struct{}, 0, len(s.wire))
	for _, e := range s.wire { // paho's entries and the direct ones
		chs = append(chs, e.doneLocked())
	}
	return chs
}

// len returns the number of publishes not yet completed, paho's and the
// direct ones.
func (s *uplinkStore) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.wire)
}

func (s *uplinkStore) sortedLocked() []*outbound {
	es := make([]*outbound, 0, len(s.out))
	for _, e := range s.out {
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b *outbound) int { return cmp.Compare(a.rec, b.rec) })
	return es
}

// Open is part of mqtt.Store; the store outlives paho's clients.
func (s *uplinkStore) Open() {}

// Close is part of mqtt.Store; the store outlives paho's clients.
func (s *uplinkStore) Close() {}

// Put is called by paho for a PUBLISH it sends (QoS 1/2), a SUBSCRIBE or
// UNSUBSCRIBE (ignored: the bridge subscribes itself on every connect) and
// for inbound QoS 2 state.
func (s *uplinkStore) Put(key string, p packets.ControlPacket) {
	inbound, pid, ok := parseKey(key)
	if !ok {
		return
	}
	if _, rel := p.(*packets.PubrelPacket); inbound && rel && s.releaseIn != nil {
		// paho sends the PUBCOMP once Put returns: the id must be
		// forgotten on disk first (inbound.go).
		s.releaseIn(pid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if inbound {
		s.in[key] = p
		return
	}
	switch p := p.(type) {
	case *packets.PublishPacket:
		if e := s.next; e != nil {
			s.next = nil
			e.pid, e.pkt = pid, p
			s.out[pid] = e
			s.wire[e.wire] = e
		}
	case *packets.PubrelPacket:
		if e := s.out[pid]; e != nil {
			e.pkt = p
		}
	}
}

// Get is part of mqtt.Store.
func (s *uplinkStore) Get(key string) packets.ControlPacket {
	inbound, pid, ok := parseKey(key)
	if !ok {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if inbound {
		return s.in[key]
	}
	if e := s.out[pid]; e != nil {
		return e.pkt
	}
	return nil
}

// All returns the outbound keys oldest record first (the order paho
// re-sends them in), then the inbound ones. paho calls it only to resume
// a persistent session on connect: the QoS 1 publishes the bridge wrote
// itself become paho's first (adoptDirectLocked), so that paho re-sends
// them with the QoS 2 flows, in the same order, under their wire ids
// with DUP set (3.1.1) [MQTT-4.4.0-1] [MQTT-3.3.1-1].
//
// A broker that answered the connection's CONNACK with session present 0
// (restarted without persistence, a failover address, a session expired)
// has none of those flows. Re-sent, a PUBREL would be answered with a
// PUBCOMP for a message it never had [MQTT-4.3.3-2](3.1.1) and the
// record would leave the spool undelivered; so, as on a clean session
// (Reset), the flows are dropped without completing them and the sender
// sends their records again as new messages: at least once, not exactly
// once, across a broker that lost its state.
func (s *uplinkStore) All() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.noSession {
		s.lostFlows = len(s.wire) // direct publishes and paho's alike
		s.resetLocked()
		return nil
	}
	s.adoptDirectLocked()
	s.resumed.Add(uint64(len(s.out)))
	keys := make([]string, 0, len(s.out)+len(s.in))
	for _, e := range s.sortedLocked() {
		keys = append(keys, "o."+strconv.Itoa(int(e.pid)))
		if _, ok := e.pkt.(*packets.PublishPacket); ok {
			e.written, e.wrote = make(chan struct{}), false // closed as paho re-sends it
		}
	}
	in := make([]string, 0, len(s.in))
	for k := range s.in {
		in = append(in, k)
	}
	slices.Sort(in)
	return append(keys, in...)
}

// Del is called by paho when a flow completed: for an outbound key, the
// PUBACK or PUBCOMP arrived.
func (s *uplinkStore) Del(key string) {
	inbound, pid, ok := parseKey(key)
	if !ok {
		return
	}
	s.mu.Lock()
	if inbound {
		delete(s.in, key)
		s.mu.Unlock()
		return
	}
	e := s.out[pid]
	if e != nil {
		delete(s.out, pid)
		delete(s.wire, e.wire)
		// Its PUBLISH was written, though the reader may complete the
		// flow before paho's Write returns to mark it (markWritten): a
		// sender waiting for it (direct.go pahoTail) must not wait on.
		if e.written != nil && !e.wrote {
			close(e.written)
			e.wrote = true
		}
	}
	s.mu.Unlock()
	if e != nil {
		s.complete(e.rec)
		close(e.done) // paho's entries have theirs (announce, adoptDirectLocked)
	}
}

// Reset is called by paho on a clean-session connect: the broker forgot
// the session, so nothing can be completed any more. The entries, the
// direct ones too, are dropped without completing them; their records
// stay in the spool and the sender sends them again as new messages.
func (s *uplinkStore) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resetLocked()
}

func (s *uplinkStore) resetLocked() {
	clear(s.out)
	clear(s.wire)
	clear(s.in)
}

// connecting starts a connection: until its CONNACK is read, the session
// is taken to be there (what paho assumes).
func (s *uplinkStore) connecting() {
	s.mu.Lock()
	s.noSession = false
	s.mu.Unlock()
}

// takeLostFlows returns how many unfinished flows the last All dropped
// because the broker had no session, and forgets it.
func (s *uplinkStore) takeLostFlows() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.lostFlows
	s.lostFlows = 0
	return n
}

// connackSession records the CONNACK's session present flag (ackRewriter).
func (s *uplinkStore) connackSession(present bool) {
	if !present && s.releaseIn != nil {
		// The broker resends no flow: no id it sent is a resend's any
		// more. Before the connection's first PUBLISH is read.
		s.releaseIn(0)
	}
	s.mu.Lock()
	s.noSession = !present
	s.mu.Unlock()
}

// parseKey splits paho's store key "o.<id>" or "i.<id>".
func parseKey(key string) (inbound bool, pid uint16, ok bool) {
	if len(key) < 3 || key[1] != '.' || (key[0] != 'i' && key[0] != 'o') {
		return false, 0, false
	}
	n, err := strconv.ParseUint(key[2:], 10, 16)
	if err != nil || n == 0 {
		return false, 0, false
	}
	return key[0] == 'i', uint16(n), true
}
