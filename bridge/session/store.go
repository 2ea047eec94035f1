package session

import (
	"cmp"
	"slices"
	"sync"
)

// Store is the engine's durable state: the outbound QoS 2 flows it
// started (by spool record) and the records the peer acknowledged. (The
// inbound QoS 2 ids are kept with their messages' routing: Config.Inbound.) bridge/spool
// implements it (spool.Session); MemStore keeps it in memory.
//
// Durability is what exactly once needs and no more: Released is
// durable when it returns (the engine sends the PUBRELs that depend on
// it only then); Sent need not be (a record's packet id is derived from the
// record, so a restarted engine re-sends it under the same id anyway).
type Store interface {
	// Flows returns the outbound QoS 2 flows whose PUBLISH was sent and
	// whose record is still unacknowledged, oldest record first.
	Flows() ([]StoredFlow, error)
	// Sent records that record rec's QoS 2 PUBLISH went out under id.
	Sent(rec uint64, id uint16) error
	// Released records durably that the peer answered the PUBLISHes of
	// recs with PUBREC: from now on their flows are re-sent as PUBREL.
	Released(recs []uint64) error
	// ResetFlows forgets every outbound flow: the peer has no session.
	ResetFlows() error
	// Ack removes record rec: the peer acknowledged it upstream.
	Ack(rec uint64) error
	// Drop removes record rec: the peer refused it for good (reason rc).
	Drop(rec uint64, rc byte) error
}

// StoredFlow is an outbound QoS 2 flow a Store kept.
type StoredFlow struct {
	Rec      uint64
	ID       uint16
	Released bool // PUBREC received: the flow is at its PUBREL
}

// MemStore is a Store in memory: exactly once across reconnects, not
// across a restart. Acked and dropped records are counted. Safe for
// concurrent use.
type MemStore struct {
	mu      sync.Mutex
	flows   map[uint64]StoredFlow
	acked   []uint64
	dropped map[uint64]byte
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore {
	return &MemStore{flows: map[uint64]StoredFlow{}, dropped: map[uint64]byte{}}
}

// Flows implements Store.
func (m *MemStore) Flows() ([]StoredFlow, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fs := make([]StoredFlow, 0, len(m.flows))
	for _, f := range m.flows {
		fs = append(fs, f)
	}
	slices.SortFunc(fs, func(a, b StoredFlow) int { return cmp.Compare(a.Rec, b.Rec) })
	return fs, nil
}

// Sent implements Store.
func (m *MemStore) Sent(rec uint64, id uint16) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.flows[rec] = StoredFlow{Rec: rec, ID: id}
	return nil
}

// Released implements Store.
func (m *MemStore) Released(recs []uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range recs {
		if f, ok := m.flows[r]; ok {
			f.Released = true
			m.flows[r] = f
		}
	}
	return nil
}

// ResetFlows implements Store.
func (m *MemStore) ResetFlows() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.flows)
	return nil
}

// Ack implements Store.
func (m *MemStore) Ack(rec uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.flows, rec)
	m.acked = append(m.acked, rec)
	return nil
}

// Drop implements Store.
func (m *MemStore) Drop(rec uint64, rc byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.flows, rec)
	m.dropped[rec] = rc
	return nil
}

// Acked returns the records acknowledged so far, in order.
func (m *MemStore) Acked() []uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.acked)
}
