package config

import (
	"net"
	"strings"
)

// LoopbackAddress reports whether a listener address host:port binds the
// loopback interface only (127.0.0.0/8, ::1 or "localhost"). An empty host,
// 0.0.0.0, :: and any other address reach the network.
func LoopbackAddress(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	host, _, _ = strings.Cut(host, "%") // zone of a link-local address
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// AnonymousNetworkListeners returns the tcp and websocket listeners that
// other hosts can reach without any credentials: bound to a non-loopback
// address while auth.allow_anonymous is true, and not requiring a client
// certificate (tls.client_ca). A password file does not close them: with
// allow_anonymous true, a client that sends no user name is still let in.
// Serial listeners are not on the network and are never listed.
func (c Config) AnonymousNetworkListeners() []Listener {
	var out []Listener
	for _, l := range c.Listeners {
		if c.AnonymousOnNetwork(l) {
			out = append(out, l)
		}
	}
	return out
}

// AnonymousOnNetwork reports whether listener l (one of c's) is listed by
// AnonymousNetworkListeners.
func (c Config) AnonymousOnNetwork(l Listener) bool {
	if !c.Auth.AllowAnonymous || (l.Type != ListenerTCP && l.Type != ListenerWebSocket) {
		return false
	}
	return !LoopbackAddress(l.Address) && l.TLS.ClientCA == ""
}
