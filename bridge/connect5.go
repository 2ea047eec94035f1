package bridge

// Connecting the MQTT 5 uplink (see the design note in uplink5.go): the
// connection paho.golang runs on, CONNECT/CONNACK with the broker's limits,
// the in rules' subscriptions and the inbound handler.

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// lockedConn is the MQTT 5 uplink's connection as paho.golang sees it:
// paho writes a packet in several Writes (header, then body), from
// several goroutines, and holds the lock while it does when the
// connection is a sync.Locker. It also keeps the first bytes read, to
// recognise a 3.1.1 broker's refusal of version 5.
type lockedConn struct {
	*deadlineConn
	sync.Mutex
	first []byte // up to 4 bytes; only paho's reader touches it
}

func (c *lockedConn) Read(p []byte) (int, error) {
	n, err := c.deadlineConn.Read(p)
	if len(c.first) < 4 {
		c.first = append(c.first, p[:min(n, 4-len(c.first))]...)
	}
	return n, err
}

// refused311 reports whether the broker answered with a 3.1.1 CONNACK
// "unacceptable protocol version" (return code 1) [MQTT-3.1.2-2](3.1.1).
func (c *lockedConn) refused311() bool {
	return len(c.first) == 4 && c.first[0] == 0x20 && c.first[1] == 2 && c.first[3] == 1
}

// connect5 dials u and brings an MQTT 5 connection up, subscriptions
// included.
func (b *Bridge) connect5(ctx context.Context, u *url.URL) (*uplink5, error) {
	s := &uplink5{uplink: &uplink{b: b, addr: u, lost: make(chan error, 1)}, recvMax: 65535, maxQoS: 2, retain: true}
	s.bo = backoff{min: min(retryMin, b.cfg.ReconnectMin), max: b.cfg.ReconnectMax}
	onTimeout := func(err error) {
		b.writeTimeouts.Add(1)
		why := fmt.Errorf("write timeout: %w", err)
		s.setCause(why)
		b.setState(Disconnected, "", why)
	}
	nc, err := b.dial(ctx, u, nil, &s.slot, onTimeout)
	if err != nil {
		return nil, err
	}
	lc := &lockedConn{deadlineConn: nc.(*deadlineConn)}
	lost := func(err error) {
		select {
		case s.lost <- err:
		default:
		}
	}
	s.c = paho.NewClient(paho.ClientConfig{
		ClientID:          b.cfg.ClientID,
		Conn:              lc,
		Session:           b.sess5, // outlives the client
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){b.inbound5},
		PacketTimeout:     b.cfg.AckTimeout, // SUBACK, UNSUBACK
		OnClientError:     lost,
		OnServerDisconnect: func(d *paho.Disconnect) {
			lost(&serverDisconnect{rc: d.ReasonCode})
		},
	})
	cp := &paho.Connect{
		ClientID:     b.cfg.ClientID,
		KeepAlive:    uint16(b.cfg.KeepAlive / time.Second),
		CleanStart:   b.cfg.CleanSession,
		Username:     b.cfg.Username,
		UsernameFlag: b.cfg.Username != "",
		Password:     []byte(b.cfg.Password),
		PasswordFlag: b.cfg.Password != "",
	}
	if !b.cfg.CleanSession {
		// A persistent session: kept by the broker until the bridge comes
		// back [MQTT-3.1.2-23], as clean_session false does over 3.1.1
		// [MQTT-3.1.2-4](3.1.1).
		never := uint32(0xFFFFFFFF)
		cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: &never}
	}
	cctx, cancel := context.WithTimeout(ctx, b.cfg.ConnectTimeout)
	ca, err := s.c.Connect(cctx, cp)
	cancel()
	if err != nil {
		s.slot.close() // paho closed it too
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if lc.refused311() || (ca != nil && ca.ReasonCode == rcUnsupportedProtocol) {
			return nil, fmt.Errorf("connect %s: %w", u.Redacted(), errV5Refused)
		}
		if ca != nil {
			return nil, fmt.Errorf("connect %s: CONNACK 0x%02x: %w", u.Redacted(), ca.ReasonCode, err)
		}
		return nil, fmt.Errorf("connect %s: %w", u.Redacted(), err)
	}
	s.done = s.c.Done()
	if n := b.sess5.takeLostFlows(); n > 0 && !b.cfg.CleanSession { // Clean Start: forgotten on purpose
		b.log.Warn("upstream has no session for the bridge (session present 0): its unfinished flows are sent again as new messages",
			"address", u.Redacted(), "flows", n)
	}
	if p := ca.Properties; p != nil {
		if p.ReceiveMaximum != nil && *p.ReceiveMaximum > 0 {
			s.recvMax = int(*p.ReceiveMaximum)
		}
		if p.MaximumPacketSize != nil {
			s.maxPacket = int(*p.MaximumPacketSize)
		}
		if p.MaximumQoS != nil {
			s.maxQoS = *p.MaximumQoS
		}
		s.retain = p.RetainAvailable
	}
	b.learned(s.uplink, Upstream{Protocol: Protocol5, MaxQoS: b.maxQoS(s.maxQoS), RetainAvailable: s.retain,
		ReceiveMaximum: s.recvMax, MaxPacketSize: s.maxPacket}) // upstream.go
	if err := b.subscribeAll5(ctx, s); err != nil {
		s.waitLost5()
		return nil, b.lostInSetup(err, true) // stuck.go
	}
	return s, nil
}

// retryMin is the first backoff after a temporary refusal (at most
// reconnect_min).
const retryMin = 100 * time.Millisecond

// waitLost5 closes the socket and waits (bounded) until paho's client has
// shut down: its session calls must end before the next connection's
// begin.
func (s *uplink5) waitLost5() {
	s.slot.close()
	t := time.NewTimer(s.b.cfg.WriteTimeout + s.b.cfg.ConnectTimeout)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		s.b.log.Error("MQTT 5 client did not shut down in time")
	}
}

// subscribeAll5 is subscribeAll for an MQTT 5 connection: the in rules
// with No Local set, so the broker never sends the bridge's own publishes
// back [MQTT-3.8.3-3] (the bridge flag of 3.1.1). A reload's change of the
// in rules applies at the next connection (syncSubs knows 3.1.1 clients
// only).
func (b *Bridge) subscribeAll5(ctx context.Context, s *uplink5) error {
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
	rl.live, rl.have = nil, subs
	rl.subMu.Unlock()
	if len(subs) > 0 {
		var opts []paho.SubscribeOptions
		for f, q := range subs {
			opts = append(opts, paho.SubscribeOptions{Topic: f, QoS: q, NoLocal: true, RetainAsPublished: true}) // a retained command stays retained locally (3.1.1: the bridge flag)
		}
		slices.SortFunc(opts, func(a, b paho.SubscribeOptions) int { return cmpString(a.Topic, b.Topic) })
		if _, err := s.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: opts}); err != nil {
			return fmt.Errorf("subscribe %s: %w", s.addr.Redacted(), err)
		}
	}
	if len(stale) > 0 && !b.cfg.CleanSession {
		slices.Sort(stale)
		if _, err := s.c.Unsubscribe(ctx, &paho.Unsubscribe{Topics: stale}); err != nil {
			return fmt.Errorf("unsubscribe %s: %w", s.addr.Redacted(), err)
		}
		rl.subMu.Lock()
		for _, f := range stale {
			delete(rl.stale, f)
		}
		rl.subMu.Unlock()
	}
	return nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
