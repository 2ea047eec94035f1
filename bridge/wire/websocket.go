package wire

// MQTT over WebSocket (ws://, wss://) through eclipse/paho.mqtt.golang's
// WebSocket transport: a net.Conn over gorilla/websocket that offers the
// "mqtt" subprotocol and carries the packets as binary frames, as brokers
// expect. A Conn over it is a Conn like any other; only the dial differs.

import (
	"crypto/tls"
	"net"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// DialWebSocket opens a WebSocket connection to url (ws:// or wss://,
// with tlsc for wss) within timeout.
func DialWebSocket(url string, tlsc *tls.Config, timeout time.Duration) (net.Conn, error) {
	return mqtt.NewWebsocket(url, tlsc, timeout, nil, nil)
}
