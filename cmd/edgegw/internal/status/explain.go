package status

import (
	"maps"
	"slices"
	"strings"
)

// explanations turn the bridge's last error (a Go error chain) into a
// sentence for the person at the cabinet. The first match wins; the raw
// error is shown next to it.
var explanations = []struct{ substr, text string }{
	// Before "connection reset" and "EOF", which the bridge's hints wrap (bridge/collision.go, bridge/stuck.go).
	{"another client is probably using client id", "Another client probably uses this bridge's client id: the cloud broker keeps ending the connection right after it connects, as it does when a second client logs in with the same id (two gateways from one config). Give each gateway its own client_id (the default is unique per machine; ${env:NAME} gives one per container). A broker that takes fewer QoS 2 messages in flight than max_inflight_qos2 (mosquitto's max_inflight_messages) ends the connection the same way: then lower max_inflight_qos2."},
	{"max_packet_size", "The cloud broker keeps closing the connection right after the same message: it is probably larger than the broker's packet size limit. Set bridges[].max_packet_size to that limit (larger messages are then dropped as packet too large and the rest flows); until then that message blocks the ones behind it."},
	{"connection refused", "The cloud broker's host answered but nothing accepts connections on that port (broker down or wrong port)."},
	{"no such host", "The cloud broker's name does not resolve (DNS, or no network)."},
	{"server misbehaving", "DNS lookup failed (no network or DNS server unreachable)."},
	{"network is unreachable", "No route to the cloud: the network or the default route is down."},
	{"no route to host", "No route to the cloud broker's host."},
	{"i/o timeout", "The cloud broker did not answer in time (network down, firewall, or overloaded broker)."},
	{"deadline exceeded", "The cloud broker did not answer in time (network down, firewall, or overloaded broker)."},
	{"watchdog", "The uplink stopped acknowledging messages and was torn down by the ack watchdog."},
	{"write timeout", "Writing to the cloud broker stalled past write_timeout (half-open link or congested uplink)."},
	{"connection reset", "The cloud broker or a middlebox reset the connection."},
	{"broken pipe", "The connection was closed by the other side while writing."},
	{"EOF", "The cloud broker closed the connection."},
	{"certificate", "TLS certificate problem: check the CA, the client certificate and the clock."},
	{"tls", "TLS handshake failed."},
	{"not authorized", "The cloud broker refused the login (user name, password or certificate)."},
	{"bad user name or password", "The cloud broker refused the user name or password."},
	{"identifier rejected", "The cloud broker refused the bridge's client id."},
	{"stopped", "The bridge was stopped."},
}

// explain returns the sentence for a bridge error, "" for none.
func explain(err string) string {
	if err == "" {
		return ""
	}
	low := strings.ToLower(err)
	for _, e := range explanations {
		if strings.Contains(low, strings.ToLower(e.substr)) {
			return e.text
		}
	}
	return "The uplink failed: " + err
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
