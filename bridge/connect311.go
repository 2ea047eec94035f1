package bridge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
)

// waitLost closes the socket and waits (bounded) until paho has stopped
// its workers and reported the loss.
func (s *uplink311) waitLost() {
	s.slot.close()
	t := time.NewTimer(s.b.cfg.WriteTimeout + s.b.cfg.ConnectTimeout)
	defer t.Stop()
	select {
	case <-s.lost:
	case <-t.C:
	}
}

// connect dials u and brings an MQTT 3.1.1 connection up, subscriptions
// included.
func (b *Bridge) connect(ctx context.Context, u *url.URL) (*uplink311, error) {
	s := &uplink311{uplink: &uplink{b: b, addr: u, lost: make(chan error, 1)}}
	level := b.flagLevel(u.String()) // upstream.go
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
		SetProtocolVersion(level).
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
	s.keepalive, _ = s.client.(keepaliveClient) // direct.go inUse
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
		if ct, ok := tok.(*mqtt.ConnectToken); ok && ct.ReturnCode() == packets.ErrRefusedBadProtocolVersion && level != 4 {
			if !b.refusedFlag(u.String()) {
				return nil, fmt.Errorf("connect %s: the upstream refuses the bridge protocol flag (protocol level 0x84) and bridge_flag is always: %w", u.Redacted(), err)
			}
			return b.connect(ctx, u)
		}
		return nil, fmt.Errorf("connect %s: %w", u.Redacted(), err)
	}
	if n := b.store.takeLostFlows(); n > 0 {
		b.log.Warn("upstream has no session for the bridge (session present 0): its unfinished flows are sent again as new messages",
			"address", u.Redacted(), "flows", n)
	}
	b.learned(s.uplink, Upstream{Protocol: Protocol311, BridgeFlag: level == 0x84, BridgeFlagRefused: b.flagRefused[u.String()],
		MaxQoS: b.maxQoS(2), RetainAvailable: true})
	// paho has re-sent the stored publishes; the PUBRELs among them hold
	// packet ids paho does not reserve, so they must complete before any
	// new SUBSCRIBE or PUBLISH takes an id (session311.go).
	if rels := b.store.pendingPubrels(); len(rels) > 0 {
		if err := waitAll(ctx, rels, b.cfg.AckTimeout); err != nil {
			s.waitLost()
			return nil, b.lostInSetup(fmt.Errorf("complete %d PUBREL re-sent to %s: %w", len(rels), u.Redacted(), err), false) // stuck.go
		}
	}
	if err := b.subscribeAll(ctx, s); err != nil { // reload.go
		s.waitLost()
		return nil, b.lostInSetup(err, false)
	}
	return s, nil
}

// errNoAnswer is why the bridge gave up waiting for an answer upstream
// (the connection was not lost: stuck.go).
var errNoAnswer = errors.New("no answer")

// waitToken waits for t within d or until ctx ends.
func waitToken(ctx context.Context, t mqtt.Token, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-t.Done():
		return t.Error()
	case <-timer.C:
		return fmt.Errorf("%w within %s", errNoAnswer, d)
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
			return fmt.Errorf("%w within %s", errNoAnswer, d)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// subscribeAll is connect's last step: it subscribes the in rules in force
// on the new connection s (and unsubscribes filters removed by a reload
// from a persistent upstream session), then makes s the live connection
// for later reloads. Reload cannot interleave: the SUBSCRIBE is handed to paho
// under subMu, so a reload's own SUBSCRIBE/UNSUBSCRIBE follows it.
func (b *Bridge) subscribeAll(ctx context.Context, s *uplink311) error {
	rl := &b.rl
	rl.subMu.Lock()
	if rl.pending.Load() != nil { // a reload changed the settings while this connection was made
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
	var toks []mqtt.Token
	if len(subs) > 0 {
		toks = append(toks, s.client.SubscribeMultiple(subs, nil))
	}
	if len(stale) > 0 && !b.cfg.CleanSession {
		toks = append(toks, s.client.Unsubscribe(stale...))
	}
	rl.live, rl.have = s, subs
	rl.subMu.Unlock()
	for _, t := range toks {
		err := waitToken(ctx, t, b.cfg.AckTimeout)
		if err == nil {
			err = subackError(t)
		}
		if err != nil {
			return fmt.Errorf("subscribe %s: %w", s.addr.Redacted(), err)
		}
	}
	if len(stale) > 0 {
		rl.subMu.Lock()
		for _, f := range stale {
			delete(rl.stale, f)
		}
		rl.subMu.Unlock()
	}
	return nil
}
