package gateway

import (
	"io"

	"github.com/edgegw/edgegw/gateway/packet"
)

// handleDisconnect ends the connection on the client's DISCONNECT. A v5
// client may change the session expiry with it, and keep its will (0x04).
func (c *client) handleDisconnect(p *packet.Disconnect) error {
	if c.version == packet.V5 {
		if p.Props.Has(packet.PropSessionExpiry) {
			c.sess.mu.Lock()
			zero := c.sess.expiry == 0
			if c.sess.conn == c && !(zero && p.Props.SessionExpiry != 0) {
				c.sess.expiry = c.srv.capExpiry(p.Props.SessionExpiry)
			}
			c.sess.mu.Unlock()
			if zero && p.Props.SessionExpiry != 0 {
				return c.protocolError(packet.ProtocolError, "session expiry set on DISCONNECT after 0 on CONNECT") // 5.0 §3.14.2.2.2
			}
		}
		if p.ReasonCode != 0 {
			// Only a normal DISCONNECT (0x00) discards the will
			// [MQTT-3.14.4-3]: 0x04 asks for it, and a client that ends
			// on an error (0x80 and up) is not ending normally
			// [MQTT-3.1.2-10].
			c.keepWill = true
			c.setReason(CloseClientDisconnect)
			return io.EOF
		}
	}
	c.setReason(CloseClientDisconnect)
	return io.EOF
}
