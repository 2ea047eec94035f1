package bridge

// RawUpstream5 is an MQTT 5 server for tests, written with paho.golang's
// packet codec, that keeps one persistent session and answers exactly as
// told: a chosen message (by payload) gets a sequence of reason codes on
// its PUBACK/PUBREC, one per attempt, or no PUBREC/PUBCOMP at all, so a
// test can see what the bridge does with refusals and with flows cut by a
// reconnect. It counts deliveries as a broker does: a QoS 2 PUBLISH whose
// packet id is held (PUBREC sent, no PUBREL yet) is the same message
// again, not a new delivery [MQTT-4.3.3-10]. Exported to bridge_test.

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
)

// Answer5 says how RawUpstream5 answers one message (by payload).
type Answer5 struct {
	Codes     []byte // reason codes of the PUBACK/PUBREC of the 1st, 2nd, ... attempt; success after
	NoPubrec  bool   // QoS 2: never a PUBREC
	NoPubcomp bool   // QoS 2: PUBREC, but no PUBCOMP for the PUBREL
}

// RawUpstream5: see the note at the top of the file.
type RawUpstream5 struct {
	t  testing.TB
	ln net.Listener
	wg sync.WaitGroup

	RecvMax   uint16 // Receive Maximum in CONNACK (0: none sent)
	MaxPacket uint32 // Maximum Packet Size in CONNACK (0: none sent); set before the first connection

	mu        sync.Mutex
	rule      map[string]*Answer5
	attempts  map[string]int    // PUBLISH packets per payload (re-sends included)
	delivered map[string]int    // deliveries per payload (accepted and new)
	held      map[uint16]string // QoS 2: id -> payload, PUBREC sent, no PUBREL yet
	inflight  int               // QoS 2 PUBLISH never answered (NoPubrec) on this connection
	maxIn     int               // the most QoS 2 flows held at once (receive quota used)
	conns     int
	conn      net.Conn
	dups      int
	rels      int
	connects  []byte // protocol version of every CONNECT
	withheld  int    // answers withheld by NoPubrec or NoPubcomp
}

// Withheld returns the answers withheld so far (PUBREC or PUBCOMP).
func (u *RawUpstream5) Withheld() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.withheld
}

// StartRawUpstream5 listens on 127.0.0.1; it stops in t's cleanup.
func StartRawUpstream5(t testing.TB, recvMax uint16, rule map[string]*Answer5) *RawUpstream5 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if rule == nil {
		rule = make(map[string]*Answer5)
	}
	u := &RawUpstream5{t: t, ln: ln, RecvMax: recvMax, rule: rule, attempts: make(map[string]int),
		delivered: make(map[string]int), held: make(map[uint16]string)}
	u.wg.Add(1)
	go u.accept()
	t.Cleanup(func() {
		ln.Close()
		u.Drop()
		u.wg.Wait()
	})
	return u
}

func (u *RawUpstream5) URL() string { return "tcp://" + u.ln.Addr().String() }

func (u *RawUpstream5) accept() {
	defer u.wg.Done()
	for {
		c, err := u.ln.Accept()
		if err != nil {
			return
		}
		u.mu.Lock()
		if u.conn != nil {
			u.conn.Close()
		}
		u.conn = c
		u.conns++
		u.inflight = 0
		u.mu.Unlock()
		u.wg.Add(1)
		go func() { defer u.wg.Done(); u.serve(c) }()
	}
}

// Drop closes the current connection.
func (u *RawUpstream5) Drop() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.conn != nil {
		u.conn.Close()
	}
}

// AnswerEverything clears the rules: every message is accepted from now.
func (u *RawUpstream5) AnswerEverything() {
	u.mu.Lock()
	clear(u.rule)
	u.mu.Unlock()
}

// Delivered returns how often payload was delivered (0: never).
func (u *RawUpstream5) Delivered(payload string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.delivered[payload]
}

// Attempts returns the PUBLISH packets received with payload.
func (u *RawUpstream5) Attempts(payload string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.attempts[payload]
}

// Stats5 is a snapshot of RawUpstream5's counters.
type Stats5 struct {
	Conns, Dups, Rels, MaxInflight int
	Distinct, Duplicated           int    // payloads delivered; of them, delivered more than once
	Connects                       []byte // protocol version of every CONNECT
}

func (u *RawUpstream5) Stats() Stats5 {
	u.mu.Lock()
	defer u.mu.Unlock()
	st := Stats5{Conns: u.conns, Dups: u.dups, Rels: u.rels, MaxInflight: u.maxIn, Connects: append([]byte(nil), u.connects...)}
	for _, n := range u.delivered {
		st.Distinct++
		if n > 1 {
			st.Duplicated++
		}
	}
	return st
}

func (u *RawUpstream5) serve(c net.Conn) {
	defer c.Close()
	first := true
	for {
		cp, err := packets.ReadPacket(c)
		if err != nil {
			return
		}
		var out []func() error
		w := func(p interface{ Buffers() net.Buffers }, typ, flags byte) {
			out = append(out, func() error {
				_, err := (&packets.ControlPacket{FixedHeader: packets.FixedHeader{Type: typ, Flags: flags}, Content: p.(packets.Packet)}).WriteTo(c)
				return err
			})
		}
		u.mu.Lock()
		switch p := cp.Content.(type) {
		case *packets.Connect:
			u.connects = append(u.connects, p.ProtocolVersion)
			if !first {
				u.mu.Unlock()
				return
			}
			ack := &packets.Connack{SessionPresent: u.conns > 1 && !p.CleanStart, Properties: &packets.Properties{}}
			if u.RecvMax > 0 {
				rm := u.RecvMax
				ack.Properties.ReceiveMaximum = &rm
			}
			if u.MaxPacket > 0 {
				mp := u.MaxPacket
				ack.Properties.MaximumPacketSize = &mp
			}
			w(ack, packets.CONNACK, 0)
		case *packets.Publish:
			pl := string(p.Payload)
			u.attempts[pl]++
			if p.Duplicate {
				u.dups++
			}
			if p.QoS == 0 {
				u.delivered[pl]++
				break
			}
			a := u.rule[pl]
			var rc byte
			if a != nil && len(a.Codes) > 0 {
				rc, a.Codes = a.Codes[0], a.Codes[1:]
			}
			if p.QoS == 1 {
				if rc < 0x80 {
					u.delivered[pl]++
				}
				w(&packets.Puback{PacketID: p.PacketID, ReasonCode: rc, Properties: &packets.Properties{}}, packets.PUBACK, 0)
				break
			}
			if held, ok := u.held[p.PacketID]; ok && held == pl {
				// the same message again: PUBREC again, not a new delivery
				w(&packets.Pubrec{PacketID: p.PacketID, Properties: &packets.Properties{}}, packets.PUBREC, 0)
				break
			}
			if a != nil && a.NoPubrec {
				u.inflight++ // holds a place of the quota until the connection ends
				u.withheld++
				u.maxIn = max(u.maxIn, u.inflight+len(u.held))
				break
			}
			if rc < 0x80 {
				u.delivered[pl]++
				u.held[p.PacketID] = pl
				u.maxIn = max(u.maxIn, u.inflight+len(u.held))
			}
			w(&packets.Pubrec{PacketID: p.PacketID, ReasonCode: rc, Properties: &packets.Properties{}}, packets.PUBREC, 0)
		case *packets.Pubrel:
			u.rels++
			pl, ok := u.held[p.PacketID]
			if a := u.rule[pl]; a != nil && a.NoPubcomp {
				u.withheld++
				break
			}
			delete(u.held, p.PacketID)
			pc := &packets.Pubcomp{PacketID: p.PacketID, Properties: &packets.Properties{}}
			if !ok {
				pc.ReasonCode = 0x92
			}
			w(pc, packets.PUBCOMP, 0)
		case *packets.Subscribe:
			w(&packets.Suback{PacketID: p.PacketID, Reasons: make([]byte, len(p.Subscriptions)), Properties: &packets.Properties{}}, packets.SUBACK, 0)
		case *packets.Pingreq:
			w(&packets.Pingresp{}, packets.PINGRESP, 0)
		case *packets.Disconnect:
			u.mu.Unlock()
			return
		}
		u.mu.Unlock()
		first = false
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		for _, f := range out {
			if err := f(); err != nil {
				return
			}
		}
	}
}
