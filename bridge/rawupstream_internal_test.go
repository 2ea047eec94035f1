package bridge

// RawUpstream is an MQTT 3.1.1 server for tests, written with paho's
// packet codec, that keeps one persistent session and answers exactly as
// told, so a test can Withhold the PUBACK, PUBREC or PUBCOMP of chosen
// messages across reconnects and see what the bridge does with them. It is
// exported (to the bridge_test package only: this is a _test file).

import (
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"
)

// Withhold says which answer a message (by payload) never gets.
type Withhold uint8

const (
	AnswerAll Withhold = iota
	NoPuback           // QoS 1: no PUBACK
	NoPubrec           // QoS 2: no PUBREC (so no PUBREL, no PUBCOMP)
	NoPubcomp          // QoS 2: PUBREC, but no PUBCOMP for the PUBREL
)

// RawUpstream: see the note at the top of the file.
type RawUpstream struct {
	t  testing.TB
	ln net.Listener
	wg sync.WaitGroup

	mu       sync.Mutex
	rule     map[string]Withhold // payload -> answer withheld
	byID     map[uint16]string   // session state: packet id -> payload of its PUBLISH
	conns    int                 // connections accepted
	conn     net.Conn            // the current one
	received map[string]int      // PUBLISH packets per payload (re-sends included)
	dups     int                 // PUBLISH with DUP set
	rels     int                 // PUBREL packets
	wire     []RawPacket         // every PUBLISH and PUBREL read, in order
	open     map[uint16]bool     // packet ids of publish flows not ended by this server's PUBACK/PUBCOMP
	requests []RawPacket         // every SUBSCRIBE and UNSUBSCRIBE read (Clash: its id was open)
	ignore   map[string]bool     // a SUBSCRIBE to one of these filters goes unanswered, once
	down     bool                // close every new connection at once (SetDown)
	refuseV5 bool                // answer a version 5 CONNECT as a 3.1.1-only broker does
	v5       int                 // version 5 CONNECTs seen
}

// RefuseV5 makes the server answer an MQTT 5 CONNECT as a broker that
// speaks only 3.1.1: CONNACK "unacceptable protocol version" (return code
// 1), then close [MQTT-3.1.2-2](3.1.1).
func (u *RawUpstream) RefuseV5() {
	u.mu.Lock()
	u.refuseV5 = true
	u.mu.Unlock()
}

// V5Connects returns the MQTT 5 CONNECTs seen.
func (u *RawUpstream) V5Connects() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.v5
}

// StartRawUpstream listens on 127.0.0.1; it stops in t's cleanup.
func StartRawUpstream(t testing.TB, rule map[string]Withhold) *RawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &RawUpstream{t: t, ln: ln, rule: rule, byID: make(map[uint16]string), received: make(map[string]int), open: make(map[uint16]bool)}
	u.wg.Add(1)
	go u.accept()
	t.Cleanup(func() {
		ln.Close()
		u.Drop()
		u.wg.Wait()
	})
	return u
}

func (u *RawUpstream) URL() string { return "tcp://" + u.ln.Addr().String() }

func (u *RawUpstream) accept() {
	defer u.wg.Done()
	for {
		c, err := u.ln.Accept()
		if err != nil {
			return
		}
		u.mu.Lock()
		if u.down {
			u.mu.Unlock()
			c.Close()
			continue
		}
		if u.conn != nil {
			u.conn.Close() // one session, one connection (a takeover)
		}
		u.conn = c
		u.conns++
		u.mu.Unlock()
		u.wg.Add(1)
		go func() { defer u.wg.Done(); u.serve(c) }()
	}
}

// Drop closes the current connection (the bridge reconnects and resumes).
func (u *RawUpstream) Drop() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.conn != nil {
		u.conn.Close()
	}
}

// SetDown makes the server close every new connection at once (true),
// an upstream that is down, or serve them again (false).
func (u *RawUpstream) SetDown(down bool) {
	u.mu.Lock()
	u.down = down
	u.mu.Unlock()
}

// AnswerEverything clears the withholding rules.
func (u *RawUpstream) AnswerEverything() {
	u.mu.Lock()
	clear(u.rule)
	u.mu.Unlock()
}

// Stats returns the connections accepted, the PUBLISH packets with DUP
// set, the PUBREL packets and the distinct payloads received.
func (u *RawUpstream) Stats() (conns, dups, rels int, distinct int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.conns, u.dups, u.rels, len(u.received)
}

func (u *RawUpstream) serve(c net.Conn) {
	defer c.Close()
	first := true
	for {
		p, err := packets.ReadPacket(c)
		if err != nil {
			return
		}
		var reply packets.ControlPacket
		u.mu.Lock()
		switch p := p.(type) {
		case *packets.ConnectPacket:
			if !first {
				u.mu.Unlock()
				return
			}
			ack := packets.NewControlPacket(packets.Connack).(*packets.ConnackPacket)
			if p.ProtocolVersion == 5 {
				u.v5++
				if u.refuseV5 {
					ack.ReturnCode = packets.ErrRefusedBadProtocolVersion
					u.mu.Unlock()
					c.SetWriteDeadline(time.Now().Add(5 * time.Second))
					ack.Write(c)
					return
				}
			}
			ack.SessionPresent = u.conns > 1
			reply = ack
		case *packets.PublishPacket:
			pl := string(p.Payload)
			u.wire = append(u.wire, RawPacket{Conn: u.conns, Type: "PUBLISH", Payload: pl, ID: p.MessageID, QoS: p.Qos, Dup: p.Dup})
			u.received[pl]++
			if p.Dup {
				u.dups++
			}
			u.byID[p.MessageID] = pl
			if p.Qos > 0 {
				u.open[p.MessageID] = true
			}
			switch w := u.rule[pl]; {
			case p.Qos == 1 && w != NoPuback:
				a := packets.NewControlPacket(packets.Puback).(*packets.PubackPacket)
				a.MessageID = p.MessageID
				reply = a
				delete(u.open, p.MessageID)
			case p.Qos == 2 && w != NoPubrec:
				a := packets.NewControlPacket(packets.Pubrec).(*packets.PubrecPacket)
				a.MessageID = p.MessageID
				reply = a
			}
		case *packets.PubrelPacket:
			u.wire = append(u.wire, RawPacket{Conn: u.conns, Type: "PUBREL", Payload: u.byID[p.MessageID], ID: p.MessageID, QoS: 2})
			u.rels++
			if u.rule[u.byID[p.MessageID]] != NoPubcomp {
				a := packets.NewControlPacket(packets.Pubcomp).(*packets.PubcompPacket)
				a.MessageID = p.MessageID
				reply = a
				delete(u.open, p.MessageID)
			}
		case *packets.SubscribePacket:
			u.requests = append(u.requests, RawPacket{Conn: u.conns, Type: "SUBSCRIBE", ID: p.MessageID, Clash: u.open[p.MessageID]})
			if slices.ContainsFunc(p.Topics, func(f string) bool { return u.ignore[f] }) {
				for _, f := range p.Topics {
					delete(u.ignore, f)
				}
				break
			}
			a := packets.NewControlPacket(packets.Suback).(*packets.SubackPacket)
			a.MessageID = p.MessageID
			a.ReturnCodes = make([]byte, len(p.Topics))
			reply = a
		case *packets.UnsubscribePacket:
			u.requests = append(u.requests, RawPacket{Conn: u.conns, Type: "UNSUBSCRIBE", ID: p.MessageID, Clash: u.open[p.MessageID]})
			a := packets.NewControlPacket(packets.Unsuback).(*packets.UnsubackPacket)
			a.MessageID = p.MessageID
			reply = a
		case *packets.PingreqPacket:
			reply = packets.NewControlPacket(packets.Pingresp)
		case *packets.DisconnectPacket:
			u.mu.Unlock()
			return
		}
		u.mu.Unlock()
		first = false
		if reply != nil {
			c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if err := reply.Write(c); err != nil {
				return
			}
		}
	}
}

// RawPacket is a PUBLISH or PUBREL as the server read it: on which
// connection (1 the first), its packet id, QoS and DUP flag, and the
// payload of the PUBLISH it carries or releases; or a SUBSCRIBE or
// UNSUBSCRIBE (Requests), Clash when its packet id was that of a publish
// flow still open [MQTT-2.3.1-2](3.1.1).
type RawPacket struct {
	Conn    int
	Type    string // "PUBLISH", "PUBREL", "SUBSCRIBE" or "UNSUBSCRIBE"
	Payload string
	ID      uint16
	QoS     byte
	Dup     bool
	Clash   bool
}

// IgnoreSubscribeOnce makes the server leave the next SUBSCRIBE to filter
// unanswered, as a broker breaking [MQTT-3.8.4-1] would.
func (u *RawUpstream) IgnoreSubscribeOnce(filter string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.ignore == nil {
		u.ignore = make(map[string]bool)
	}
	u.ignore[filter] = true
}

// Requests returns every SUBSCRIBE and UNSUBSCRIBE read so far, in order.
func (u *RawUpstream) Requests() []RawPacket {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.requests)
}

// Wire returns every PUBLISH and PUBREL read so far, in order.
func (u *RawUpstream) Wire() []RawPacket {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.wire)
}

// IDsOf returns the packet ids under which a PUBLISH of payload arrived
// (the last payload each id carried), sorted.
func (u *RawUpstream) IDsOf(payload string) []uint16 {
	u.mu.Lock()
	defer u.mu.Unlock()
	var ids []uint16
	for id, pl := range u.byID {
		if pl == payload {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
