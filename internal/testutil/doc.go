// Package testutil holds the helpers that the tests of several packages
// share: a deadline poller (tests never sleep to wait), a free loopback
// port, Debian's mosquitto as a real broker, a pollable pseudo-terminal, a
// goroutine-safe log buffer, and a TCP proxy that puts faults on a link
// (delay, cut, refusal, freeze, lost MQTT packets). It imports only the
// standard library, so every package's tests can use it, the gateway's
// internal tests too, without an import cycle.
package testutil
