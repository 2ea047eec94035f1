package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
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

// handleConnect handles CONNECT, step by step: the client id,
// authentication, the session expiry, keepalive and limits, the will, then
// the session and the CONNACK. A step that refuses has answered CONNACK
// itself (refuse).
func (c *client) handleConnect(cp *packet.Connect) error {
	c.version = cp.Version
	c.id = cp.ClientID
	var ackProps packet.Properties

	if c.version == packet.V5 && cp.Props.Has(packet.PropAuthMethod) {
		return c.refuse(packet.BadAuthenticationMethod, "enhanced authentication is not supported")
	}
	if err := c.connectClientID(cp, &ackProps); err != nil {
		return err
	}
	if err := c.authenticate(cp); err != nil {
		return err
	}
	if w := c.srv.refusals.wait(c.id, time.Now()); w > 0 && !c.sleep(w) { // closed not_stored a moment ago (ack.go)
		c.setReason(CloseShutdown)
		return errClosed
	}
	expiry := c.connectExpiry(cp)
	if err := c.negotiateKeepAlive(cp, &ackProps); err != nil {
		return err
	}
	if err := c.negotiateLimits(cp, &ackProps); err != nil {
		return err
	}
	if err := c.acceptWill(cp); err != nil {
		return err
	}
	return c.attachAndAck(cp, expiry, ackProps)
}

// connectClientID gives a client that sent an empty client id one, where
// its protocol level allows that, or refuses it.
func (c *client) connectClientID(cp *packet.Connect, ackProps *packet.Properties) error {
	if c.id == "" {
		switch {
		case c.version == packet.V5:
			c.id = newClientID()
			ackProps.AssignedClientID = c.id // [MQTT-3.2.2-16]
			ackProps.Set(packet.PropAssignedClientID)
		case c.version == packet.V311 && cp.CleanStart:
			c.id = newClientID() // [MQTT-3.1.3-6]
		default:
			return c.refuse(packet.ClientIDNotValid, "empty client id") // [MQTT-3.1.3-8](3.1.1)
		}
	}
	return nil
}

// authenticate decides whether the client may connect: its certificate, its
// user name and password (through the tarpit), or anonymously.
func (c *client) authenticate(cp *packet.Connect) error {
	o := &c.srv.opts
	c.username = cp.Username
	if c.certCN != "" && !cp.UsernameFlag {
		c.username = c.certCN
	}
	if c.username == "" && !cp.UsernameFlag && c.certCN == "" && !o.AllowAnonymous {
		return c.refuse(packet.NotAuthorized, "anonymous clients are not allowed")
	}
	// Without allow_anonymous a client gets in only when something vouches
	// for it: its certificate (a use_cn_as_username listener: the CN is its
	// user name, no password) or a password checked against the password
	// file. A user name nothing can check is a claim anyone can make: with
	// no password file it would let any client in under any user's name,
	// on every listener, and take that user's ACL rules. On a
	// use_cn_as_username listener the same holds with allow_anonymous
	// too: the certificate names the client, and a name in CONNECT that
	// replaces it needs that user's password (docs/listeners.md).
	byCert := c.certCN != "" && c.username == c.certCN && !cp.PasswordFlag
	if (!o.AllowAnonymous || c.certCN != "") && !byCert && (o.Authenticator == nil || !o.Authenticator.ChecksPasswords()) {
		c.srv.stats.authFailures.Add(1)
		c.logf(slog.LevelInfo, "authentication failed", "user", c.username, "err", "no auth.password_file to check a user name against")
		return c.refuse(packet.BadUsernameOrPassword, "no auth.password_file: a user name cannot be checked")
	}
	if o.Authenticator != nil && (cp.UsernameFlag || !o.AllowAnonymous) {
		if r, ok := o.Authenticator.(recentLogins); ok && cp.PasswordFlag && r.Recent(c.username, cp.Password) &&
			o.Authenticator.Authenticate(c.id, c.username, cp.Password, cp.PasswordFlag, c.certCN) == nil {
			return nil // the right password, verified lately: nothing to slow down (tarpit.go)
		}
		host := hostOf(c.conn.RemoteAddr())
		tk, busy := c.srv.tarpit.admit(host, c.username, time.Now())
		if !busy {
			var closed bool
			busy, closed = c.awaitLane(tk)
			if closed {
				c.srv.tarpit.abandoned(tk)
				c.setReason(CloseShutdown)
				return errClosed
			}
		}
		if busy {
			return c.refuse(packet.ServerBusy, "too many failed logins from "+host)
		}
		// The check itself waits its turn: one nobody is guessing goes
		// before the guesses (checkgate.go).
		if !c.srv.tarpit.checks.enter(host, func() bool { return c.srv.tarpit.guessed(tk) }, c.done) {
			c.srv.tarpit.abandoned(tk)
			c.setReason(CloseShutdown)
			return errClosed
		}
		err := o.Authenticator.Authenticate(c.id, c.username, cp.Password, cp.PasswordFlag, c.certCN)
		c.srv.tarpit.checks.leave()
		if err != nil {
			c.srv.tarpit.failed(tk, time.Now())
			c.srv.stats.authFailures.Add(1)
			c.logf(slog.LevelInfo, "authentication failed", "user", c.username, "err", err)
			return c.refuse(packet.BadUsernameOrPassword, err.Error())
		}
		c.srv.tarpit.succeeded(tk)
	}
	return nil
}

// awaitLane waits until the tarpit lets tk's check through: busy when it
// waited tarpitQueueMax out, closed when the server stopped first.
func (c *client) awaitLane(tk *laneTicket) (busy, closed bool) {
	for {
		ok, busy, wait, changed := c.srv.tarpit.turn(tk, time.Now())
		if ok || busy {
			return busy, false
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-changed:
		case <-c.done:
			t.Stop()
			return false, true
		}
		t.Stop()
	}
}

// connectExpiry is the session expiry the client asked for (v5), or what a
// 3.1/3.1.1 persistent session gets.
func (c *client) connectExpiry(cp *packet.Connect) time.Duration {
	o := &c.srv.opts
	var expiry time.Duration
	switch {
	case c.version == packet.V5:
		if cp.Props.Has(packet.PropSessionExpiry) {
			expiry = c.srv.capExpiry(cp.Props.SessionExpiry)
		}
	case !cp.CleanStart:
		expiry = o.MaxSessionExpiry // 3.1/3.1.1 persistent sessions
	}
	return expiry
}

// negotiateKeepAlive sets the connection's keepalive: refused over
// limits.keepalive_max before MQTT 5, told in CONNACK (Server Keep Alive)
// over 5.
func (c *client) negotiateKeepAlive(cp *packet.Connect, ackProps *packet.Properties) error {
	o := &c.srv.opts
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
	return nil
}

// negotiateLimits sets the flow control and sizes the client asked for.
// No packet out is larger than limits.max_packet_size either ("accepted or
// sent"): a message a bridge brought in was never held to it on its way in.
func (c *client) negotiateLimits(cp *packet.Connect, ackProps *packet.Properties) error {
	o := &c.srv.opts
	if o.MaxPacketSize > 0 {
		c.maxOut = uint32(o.MaxPacketSize) // at most 256 MiB (internal/config), so it fits
	}
	c.window = o.MaxInflight
	if c.version == packet.V5 {
		if cp.Props.Has(packet.PropReceiveMaximum) {
			if cp.Props.ReceiveMaximum == 0 {
				return c.refuse(packet.ProtocolError, "receive maximum 0") // 5.0 §3.1.2.11.3: a value of 0 is a protocol error
			}
			c.window = min(c.window, int(cp.Props.ReceiveMaximum))
		}
		if cp.Props.Has(packet.PropMaximumPacketSize) {
			if cp.Props.MaximumPacketSize == 0 {
				return c.refuse(packet.ProtocolError, "maximum packet size 0")
			}
			if c.maxOut == 0 || cp.Props.MaximumPacketSize < c.maxOut {
				c.maxOut = cp.Props.MaximumPacketSize
			}
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
	return nil
}

// acceptWill checks the will (topic limits, ACL) and keeps it.
func (c *client) acceptWill(cp *packet.Connect) error {
	o := &c.srv.opts
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
	return nil
}

// attachAndAck attaches the connection to its session (taking it over from
// another connection if need be) and queues the CONNACK.
func (c *client) attachAndAck(cp *packet.Connect, expiry time.Duration, ackProps packet.Properties) error {
	if old := c.srv.reg.connected(c.id, c.username); old != nil {
		// What the old connection already received decides first: a
		// DISCONNECT with Session Expiry 0 that came just before this
		// CONNECT ends the session, and this one must not resume it.
		if old.drainBeforeAttach(min(c.srv.opts.ConnectTimeout, takeoverDrainMax)) &&
			CloseReason(old.reason.Load()) == CloseTakenOver {
			c.srv.stats.takeovers.Add(1) // it left the session for this takeover
			c.logf(slog.LevelInfo, "session taken over")
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
		res.oldConn.closeWith(CloseTakenOver, packet.SessionTakenOver) // [MQTT-3.1.4-3], [MQTT-3.1.4-2](3.1.1)
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

// capExpiry is a v5 session expiry interval (CONNECT or DISCONNECT) as a
// duration, capped by MaxSessionExpiry; 0xFFFFFFFF (never) gets the cap.
func (s *Server) capExpiry(secs uint32) time.Duration {
	if secs == 0xFFFFFFFF {
		return s.opts.MaxSessionExpiry
	}
	d := time.Duration(secs) * time.Second
	return min(d, s.opts.MaxSessionExpiry)
}

// newClientID makes an id for a client that sent an empty one.
func newClientID() string {
	var b [12]byte
	rand.Read(b[:])
	return "edgegw-" + hex.EncodeToString(b[:])
}
