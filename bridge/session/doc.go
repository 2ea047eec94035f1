// Package session is the bridge uplink's MQTT session engine, for MQTT
// 3.1.1 and 5: it alone owns the packet ids, the publishes in flight
// (count, bytes, the peer's Receive Maximum), the QoS 1 and 2 flows of
// both directions, resume after a reconnect by the CONNACK's session
// present flag, keepalive and the ack watchdog. It speaks over a
// bridge/wire connection and keeps its durable state through a Store
// (bridge/spool implements it). The design note is in engine.go.
package session
