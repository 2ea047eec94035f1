package gateway

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
)

// takeoverDrainMax bounds how long a takeover waits for the old
// connection's reader to handle what it had already received.
const takeoverDrainMax = 2 * time.Second

// refuse answers CONNECT with an error code and ends the connection.
func (c *client) refuse(code packet.ReasonCode, why string) error {
	ack := &packet.Connack{ReasonCode: code}
	if c.version != packet.V5 {
		ack.ReasonCode = v3ConnackCode(code)
	}
	c.writeRaw(ack, c.version)
	c.setReason(CloseNotAuthorized)
	if code == packet.ClientIDNotValid || code == packet.BadAuthenticationMethod || code == packet.ProtocolError {
		c.reason.Store(int32(CloseProtocolError))
	}
	if why == "" || why == code.String() { // e.g. auth.ErrBadCredentials is the code's own text
		return fmt.Errorf("connect refused: %s", code)
	}
	return fmt.Errorf("connect refused: %s: %s", code, why)
}

// v3ConnackCode maps a v5 reason code to the 3.1.1 return code.
func v3ConnackCode(code packet.ReasonCode) packet.ReasonCode {
	switch code {
	case packet.UnsupportedProtocolVersion:
		return packet.V3RefusedProtocolVersion
	case packet.ClientIDNotValid:
		return packet.V3RefusedIdentifierRejected
	case packet.BadUsernameOrPassword:
		return packet.V3RefusedBadUsernameOrPassword
	case packet.NotAuthorized, packet.BadAuthenticationMethod, packet.TopicNameInvalid:
		return packet.V3RefusedNotAuthorized
	default:
		return packet.V3RefusedServerUnavailable
	}
}

func (c *client) handleConnect(cp *packet.Connect) error {
	o := &c.srv.opts
	c.version = cp.Version
	c.id = cp.ClientID
	var ackProps packet.Properties

	if c.version == packet.V5 && cp.Props.Has(packet.PropAuthMethod) {
		return c.refuse(packet.BadAuthenticationMethod, "enhanced authentication is not supported")
	}
	if c.id == "" {
		switch {
		case c.version == packet.V5:
			c.id = newClientID()
			ackProps.AssignedClientID = c.id // [MQTT-3.2.2-16]
			ackProps.Set(packet.PropAssignedClientID)
		case c.version == packet.V311 && cp.CleanStart:
			c.id = newClientID() // [MQTT-3.1.3-6]
		default:
			return c.refuse(packet.ClientIDNotValid, "empty client id") // [MQTT-3.1.3-8]
		}
	}

	// Authentication.
	c.username = cp.Username
	if c.certCN != "" && !cp.UsernameFlag {
		c.username = c.certCN
	}
	if c.username == "" && !cp.UsernameFlag && c.certCN == "" && !o.AllowAnonymous {
		return c.refuse(packet.NotAuthorized, "anonymous clients are not allowed")
	}
	if o.Authenticator != nil && (cp.UsernameFlag || !o.AllowAnonymous) {
		host := hostOf(c.conn.RemoteAddr())
		wait, busy := c.srv.tarpit.admit(host, time.Now())
		if busy {
			return c.refuse(packet.ServerBusy, "too many failed logins from "+host)
		}
		if wait > 0 && !c.sleep(wait) {
			c.srv.tarpit.abandoned(host)
			c.setReason(CloseShutdown)
			return errClosed
		}
		if err := o.Authenticator.Authenticate(c.id, c.username, cp.Password, cp.PasswordFlag, c.certCN); err != nil {
			c.srv.tarpit.failed(host, c.username, time.Now())
			c.srv.stats.authFailures.Add(1)
			c.logf(slog.LevelInfo, "authentication failed", "user", c.username, "err", err)
			return c.refuse(packet.BadUsernameOrPassword, err.Error())
		}
		c.srv.tarpit.succeeded(host, c.username)
	}

	// Session expiry.
	var expiry time.Duration
	switch {
	case c.version == packet.V5:
		if cp.Props.Has(packet.PropSessionExpiry) {
			expiry = c.srv.capExpiry(cp.Props.SessionExpiry)
		}
	case !cp.CleanStart:
		expiry = o.MaxSessionExpiry // 3.1/3.1.1 persistent sessions
	}

	// Keepalive.
	c.keepAlive = time.Duration(cp.KeepAlive) * time.Second
	if c.version != packet.V5 && o.MaxKeepAlive > 0 && (c.keepAlive == 0 || c.keepAlive > o.MaxKeepAlive) {
		// 3.1/3.1.1 cannot be told another keepalive, and a broker that
		// silently used a shorter one would cut a client that pings on
		// its own schedule: refused, as mosquitto does with max_keepalive.
		// A keepalive of 0 (never ping) is how dead links go unnoticed.
		return c.refuse(packet.ClientIDNotValid, fmt.Sprintf("keepalive %s is above limits.keepalive_max %s (or 0)", c.keepAlive, o.MaxKeepAlive))
	}
	if c.version == packet.V5 {
		ka := c.keepAlive
		if o.ServerKeepAlive > 0 {
			ka = o.ServerKeepAlive
		}
		if o.MaxKeepAlive > 0 && (ka == 0 || ka > o.MaxKeepAlive) {
			ka = o.MaxKeepAlive
		}
		if ka != c.keepAlive {
			c.keepAlive = ka
			ackProps.ServerKeepAlive = uint16(ka / time.Second) // [MQTT-3.2.2-21]
			ackProps.Set(packet.PropServerKeepAlive)
		}
	}

	// Flow control and sizes the client asked for.
	c.window = o.MaxInflight
	if c.version == packet.V5 {
		if cp.Props.Has(packet.PropReceiveMaximum) {
			if cp.Props.ReceiveMaximum == 0 {
				return c.refuse(packet.ProtocolError, "receive maximum 0") // v5 3.1.2.11.3: a value of 0 is a protocol error
			}
			c.window = min(c.window, int(cp.Props.ReceiveMaximum))
		}
		if cp.Props.Has(packet.PropMaximumPacketSize) {
			if cp.Props.MaximumPacketSize == 0 {
				return c.refuse(packet.ProtocolError, "maximum packet size 0")
			}
			c.maxOut = cp.Props.MaximumPacketSize
		}
		c.aliasMaxOut = cp.Props.TopicAliasMaximum
		ackProps.MaximumPacketSize = uint32(o.MaxPacketSize)
		ackProps.Set(packet.PropMaximumPacketSize)
		ackProps.TopicAliasMaximum = o.TopicAliasMaximum
		ackProps.Set(packet.PropTopicAliasMaximum)
		// Receive Maximum: v5 publishers keep at most this many QoS 1/2
		// messages unacknowledged, which bounds what flow control lets
		// past the per-session limits (docs/behaviour.md); a client that
		// sends more is disconnected (inboundStart).
		c.in.max = o.ReceiveMaximum
		ackProps.ReceiveMaximum = uint16(c.in.max)
		ackProps.Set(packet.PropReceiveMaximum)
	}

	// Will.
	if w := cp.Will; w != nil {
		if !o.topicFits(w.Topic) {
			c.srv.stats.deny(deniedTopicLimit)
			return c.refuse(packet.TopicNameInvalid, "will topic over max_topic_levels or max_topic_length")
		}
		if az := o.Authorizer; az != nil && !az.CanPublish(c.username, c.id, w.Topic) {
			return c.refuse(packet.NotAuthorized, "will topic not allowed: "+w.Topic)
		}
		c.will = &Message{Topic: w.Topic, Payload: w.Payload, QoS: w.QoS, Retain: w.Retain,
			Props: passThrough(&w.Props), Origin: c.id}
		if c.version == packet.V5 {
			c.willDelay = time.Duration(w.Props.WillDelay) * time.Second
			if w.Props.Has(packet.PropMessageExpiry) {
				c.willExpiry = time.Duration(w.Props.MessageExpiry) * time.Second
			}
		}
	}

	c.wmu.Lock()
	c.connecting = true // from here a takeover waits for the CONNACK (closeWith)
	c.wmu.Unlock()
	res := c.srv.reg.attach(c, c.id, cp.CleanStart, expiry)
	if res.notOwner {
		c.wmu.Lock()
		c.connecting = false // no CONNACK will be queued: closes need not wait for one
		c.wmu.Unlock()
		c.srv.stats.deny(deniedSessionOwner)
		c.logf(slog.LevelWarn, "connect refused: client id belongs to another user's session", "user", c.username)
		return c.refuse(packet.NotAuthorized, "client id in use by another user's session") // CONNACK 0x87 (v5) / 5 (3.1.1)
	}
	c.sess = res.sess
	if res.oldConn != nil {
		c.logf(slog.LevelInfo, "session taken over")
		// What the old connection already received is handled first: a
		// client that sent DISCONNECT and reconnected at once must not
		// have its will published because the new CONNECT won the race.
		res.oldConn.drainForTakeover(min(c.srv.opts.ConnectTimeout, takeoverDrainMax))
		res.oldConn.closeWith(CloseTakenOver, packet.SessionTakenOver) // [MQTT-3.1.4-3]
	}
	present := res.present && c.version != packet.V31
	ack := &packet.Connack{SessionPresent: present, Props: ackProps}
	c.wmu.Lock()
	c.ctrl = append(c.ctrl, ctrlItem{p: ack})
	c.ready = true // publishes may follow CONNACK now
	c.startWriterLocked()
	pc := c.pendingClose
	c.wmu.Unlock()
	if pc != nil {
		c.closeWith(pc.r, pc.code) // taken over before its CONNACK was queued
	}
	c.logf(slog.LevelInfo, "client connected", "version", int(c.version), "clean", cp.CleanStart, "present", present, "keepalive", c.keepAlive)
	return nil
}

func (c *client) handlePublish(p *packet.Publish) error {
	o := &c.srv.opts
	if p.QoS > 0 && c.in.max > 0 && int(c.in.open.Load()) >= c.in.max && !(p.QoS == 2 && c.sess.hasInboundQoS2(p.PacketID)) {
		return c.protocolError(packet.ReceiveMaximumExceeded, "more than %d unacknowledged QoS 1/2 publishes", c.in.max) // [MQTT-3.3.4-9]
	}
	if p.QoS > 0 && c.in.max > 0 {
		// Opened before any answer can close it: a refused publish (topic
		// limits, $SYS, ACL) is acked too, and that ack closes this flow.
		c.in.open.Add(1)
	}
	if p.Topic != "" && !o.topicFits(p.Topic) {
		// Before a topic alias can keep it. v5: PUBACK/PUBREC 0x90;
		// 3.1.1: acknowledged and dropped, as a denied publish.
		c.srv.stats.deny(deniedTopicLimit)
		c.logf(slog.LevelDebug, "publish topic over the limits", "levels", strings.Count(p.Topic, "/")+1, "bytes", len(p.Topic))
		return c.ack(p, packet.TopicNameInvalid)
	}
	if c.version == packet.V5 && p.Props.Has(packet.PropTopicAlias) {
		a := p.Props.TopicAlias
		if a == 0 || a > o.TopicAliasMaximum {
			return c.protocolError(packet.TopicAliasInvalid, "topic alias %d", a) // [MQTT-3.3.2-9]
		}
		if p.Topic == "" {
			t, ok := c.inAliases[a]
			if !ok {
				return c.protocolError(packet.ProtocolError, "unknown topic alias %d", a)
			}
			p.Topic = t
		} else {
			if c.inAliases == nil {
				c.inAliases = make(map[uint16]string)
			}
			c.inAliases[a] = strings.Clone(p.Topic) // p.Topic shares the payload's memory
		}
	}
	if p.Topic == "" {
		return c.protocolError(packet.TopicNameInvalid, "empty topic")
	}
	if strings.HasPrefix(p.Topic, "$") && !strings.HasPrefix(p.Topic, "$share/") {
		// Clients may not publish into the broker's own namespaces.
		if strings.HasPrefix(p.Topic, "$SYS") {
			c.srv.stats.deny(deniedPublish)
			return c.ack(p, packet.NotAuthorized)
		}
	}
	if az := o.Authorizer; az != nil && !az.CanPublish(c.username, c.id, p.Topic) {
		// v5: PUBACK/PUBREC 0x87; 3.1.1 has no negative ack: acknowledged
		// and dropped, as mosquitto does, and counted.
		c.srv.stats.deny(deniedPublish)
		c.logf(slog.LevelDebug, "publish not authorized", "topic", p.Topic)
		return c.ack(p, packet.NotAuthorized)
	}
	m := &Message{
		Topic:   p.Topic,
		Payload: p.Payload, // the decoder gives each packet its own buffer
		QoS:     p.QoS,
		Retain:  p.Retain,
		Origin:  c.id,
	}
	if c.version == packet.V5 {
		m.Props = passThrough(&p.Props)
		if p.Props.Has(packet.PropMessageExpiry) {
			m.Expiry = time.Now().Add(time.Duration(p.Props.MessageExpiry) * time.Second)
		}
	}
	if p.QoS == 0 {
		c.srv.route(m)
		return nil
	}
	c.pa = pendingAck{c: c, qos: p.QoS, id: p.PacketID, topic: p.Topic}
	if p.QoS == 2 {
		st, e := c.sess.receiveQoS2(c, p.PacketID)
		switch st {
		case qos2NotOwner:
			return c.lostSession() // no PUBREC: the client sends it again on its new connection
		case qos2Kept:
			// A duplicate: acknowledged again, never delivered twice
			// [MQTT-4.3.3-9]; behind any acks still waiting, to keep order.
			// Its flow was counted when it first came.
			c.in.done()
			if c.slotsPending() {
				c.slotDone(c.addSlot(p), nil)
				return nil
			}
			return c.ack(p, packet.Success)
		case qos2Pending:
			// A resend while the original's sinks have not decided: the
			// ack waits for the same verdict (principle 4).
			c.in.done() // counted with the original
			c.sess.waitQoS2(p.PacketID, e, c.pa.deferAck())
			return nil
		}
		c.pa.q2 = e // a new flow, open until its PUBCOMP
	}
	// The ack may have to wait: for a sink (a bridge's spool) to keep the
	// message, or for a congested subscriber to drain (flow control). Then
	// routing opens a slot through c.pa; the verdict arrives later and the
	// reader goes on.
	pending, matched, err := c.srv.routeKept(m, &c.pa)
	if pending {
		return nil
	}
	if p.QoS == 2 {
		c.sess.qos2Verdict(p.PacketID, c.pa.q2, err)
	}
	code := packet.Success
	if !matched {
		code = packet.NoMatchingSubscribers // v5: nobody listens (a success code; 3.1.1 gets 0)
	}
	if c.slotsPending() {
		s := c.addSlot(p)
		s.code = code
		c.slotDone(s, err) // behind earlier acks still waiting
		return nil
	}
	if err != nil {
		return c.notKept(p.QoS, p.PacketID, p.Topic, err)
	}
	return c.ack(p, code)
}

func (c *client) handleSubscribe(p *packet.Subscribe) error {
	o := &c.srv.opts
	codes := make([]packet.ReasonCode, len(p.Subscriptions))
	type retainedSend struct {
		filter string
		sub    subscription
	}
	var sends []retainedSend
	var subID uint32
	var statePos uint64 // the SUBACK waits for the subscriptions' records
	if c.version == packet.V5 && len(p.Props.SubscriptionIDs) > 0 {
		subID = p.Props.SubscriptionIDs[0]
	}
	for i, rs := range p.Subscriptions {
		group, inner, shared := packet.SplitShared(rs.Filter)
		if shared && rs.NoLocal {
			return c.protocolError(packet.ProtocolError, "no local on a shared subscription") // [MQTT-3.8.3-4]
		}
		if !o.filterFits(rs.Filter, inner) {
			c.srv.stats.deny(deniedTopicLimit)
			codes[i] = packet.TopicFilterInvalid
			if c.version != packet.V5 {
				codes[i] = packet.V3SubackFailure
			}
			continue
		}
		if az := o.Authorizer; az != nil && !az.CanSubscribe(c.username, c.id, inner) {
			c.srv.stats.deny(deniedSubscribe)
			codes[i] = packet.NotAuthorized
			if c.version != packet.V5 {
				codes[i] = packet.V3SubackFailure
			}
			continue
		}
		room, exists := c.sess.roomFor(rs.Filter, o.MaxSubscriptions)
		if !room || (!exists && !c.srv.subscriptionFits(rs.Filter)) {
			c.srv.stats.deny(deniedSubscriptionLimit)
			codes[i] = packet.QuotaExceeded
			if c.version != packet.V5 {
				codes[i] = packet.V3SubackFailure
			}
			continue
		}
		qos := min(rs.QoS, 2)
		sub := subscription{sess: c.sess, qos: qos, noLocal: rs.NoLocal, rap: rs.RetainAsPublished,
			rh: rs.RetainHandling, subID: subID, group: group}
		existed, pos, ok := c.sess.subscribe(c, rs.Filter, inner, sub)
		if !ok {
			return c.lostSession()
		}
		statePos = max(statePos, pos)
		codes[i] = packet.ReasonCode(qos)
		// Retained messages: not for shared subscriptions; v5 retain
		// handling 1 = only if new, 2 = never [MQTT-3.3.1-9..11].
		if !shared && (rs.RetainHandling == 0 || (rs.RetainHandling == 1 && !existed)) {
			sends = append(sends, retainedSend{inner, sub})
		}
	}
	if statePos > 0 {
		// A SUBACK is a promise too; the wait (at most one sync window)
		// holds only this reader, with no lock held.
		if err := c.srv.state.Wait(statePos); err != nil {
			// Not granted: what this SUBSCRIBE added is taken back, so
			// the client is not told of a subscription a restart loses.
			c.logf(slog.LevelWarn, "subscription not stored; refused", "err", err)
			for i, rs := range p.Subscriptions {
				if codes[i] < 0x80 {
					c.sess.unsubscribe(c, rs.Filter)
					codes[i] = packet.ImplementationSpecificError
					if c.version != packet.V5 {
						codes[i] = packet.V3SubackFailure
					}
				}
			}
			sends = nil
		}
	}
	// The SUBACK is queued, but the writer is only woken once the retained
	// messages are queued too: the writer sends the control lane first, so
	// the SUBACK leads, and a client that has seen its SUBACK gets the
	// retained messages before anything published after it.
	c.queueCtrlQuiet(ctrlItem{p: &packet.Suback{PacketID: p.PacketID, ReasonCodes: codes}})
	now := time.Now()
	for _, rs := range sends {
		var ids []uint32
		if rs.sub.subID != 0 {
			ids = []uint32{rs.sub.subID}
		}
		c.srv.retained.Match(rs.filter, func(_ string, m *Message) {
			if az := o.Authorizer; az != nil && !c.sess.mayRead(az, m.Topic) {
				c.srv.stats.deny(deniedDelivery) // checked per message, as live ones
				return
			}
			// Retained sends never hold the subscriber itself (no flow control).
			c.sess.deliver(m, min(m.QoS, rs.sub.qos), true, ids, now, nil) // [MQTT-3.3.1-8] retain flag set
		})
	}
	c.kick()
	return nil
}

func (c *client) handleUnsubscribe(p *packet.Unsubscribe) error {
	codes := make([]packet.ReasonCode, len(p.Filters))
	for i, f := range p.Filters {
		found, ok := c.sess.unsubscribe(c, f)
		if !ok {
			return c.lostSession()
		}
		if !found {
			codes[i] = packet.NoSubscriptionExisted
		}
	}
	ack := &packet.Unsuback{PacketID: p.PacketID}
	if c.version == packet.V5 {
		ack.ReasonCodes = codes
	}
	c.sendCtrl(ack)
	return nil
}

// subscribe adds or replaces a subscription. filter is as the client sent
// it, inner without a $share prefix.
func (s *session) subscribe(c *client, filter, inner string, sub subscription) (existed bool, pos uint64, owner bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != c || s.destroyed {
		return false, 0, false
	}
	existed = s.subs.set(filter, sub.group)
	if !existed {
		s.srv.subBytes.Add(subCost(filter))
		if isSys(filter) {
			s.srv.sysSubs.Add(1)
		}
	}
	s.srv.subs.Add(inner, treeKey(s.id, sub.group), sub) // [MQTT-3.8.4-3] replaces
	return existed, s.persistSub(filter, sub), true
}

func (s *session) unsubscribe(c *client, filter string) (found, owner bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != c || s.destroyed {
		return false, false
	}
	group, found := s.subs.remove(filter)
	if found {
		s.srv.subBytes.Add(-subCost(filter))
		if isSys(filter) {
			s.srv.sysSubs.Add(-1)
		}
		s.srv.subs.Remove(treeFilter(filter), treeKey(s.id, group))
		s.persistUnsub(filter)
	}
	return found, true
}

// publishWill publishes a will message.
func (s *Server) publishWill(w *Message) {
	if err := s.route(w); err != nil {
		s.log.Warn("will not stored by a sink", "topic", w.Topic, "err", err)
	}
}

func isSys(filter string) bool { return strings.HasPrefix(filter, "$SYS") }

// lostSession is a packet that needs the session, read after another
// connection took it: only a takeover moves a session away from a live
// connection, and the takeover closes this one (after shutting its read
// side, on TCP: drainForTakeover). Until then the packet is dropped
// unanswered (the client repeats it on its new connection) and reading goes
// on, so a DISCONNECT behind it is still seen and the will not published.
// The takeover may not have reached drainForTakeover yet when this runs.
func (c *client) lostSession() error { return nil }
