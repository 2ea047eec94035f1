// Command gofloor is the least an MQTT broker written in Go does for the
// bench's sensor fleets (issue 16), so that what the Go runtime alone costs
// at sensor rates can be measured next to edgegw and mosquitto in one run.
//
// It parses nothing but the fixed header: no topic matching, sessions,
// limits, deadlines or authorization. Every PUBLISH is copied to every
// subscriber as it came; a QoS 1 one is answered with a PUBACK and, with
// -upstream, also written to that broker at QoS 1 and kept nowhere (less
// than mosquitto's bridge, which keeps it in memory until the upstream's
// PUBACK and on disk only at autosave). It is a measuring stick,
// not a broker: it serves one clean MQTT 3.1.1 session per connection and
// assumes well-formed packets.
//
// Two designs: a goroutine per connection reading and writing raw through
// internal/sockio (edgegw's), or, with -epoll, one event loop over raw
// non-blocking sockets parked in the Go poller on the epoll descriptor
// (mosquitto's, in Go). Every per-reading system call is raw: an ordinary
// one wakes the runtime's monitor thread, a cost edgegw does not pay.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:1883", "listen address (host:port)")
	upstream := flag.String("upstream", "", "bridge every QoS 1 PUBLISH to this broker (host:port)")
	epoll := flag.Bool("epoll", false, "one event loop instead of a goroutine per connection")
	flag.Parse()
	var err error
	if *epoll {
		err = runEventLoop(*addr, *upstream)
	} else {
		err = runGoroutines(*addr, *upstream)
	}
	fmt.Fprintln(os.Stderr, "gofloor:", err)
	os.Exit(1)
}

// connectPacket is the uplink's CONNECT: MQTT 3.1.1, clean session, keepalive 60 s.
func connectPacket(clientID string) []byte {
	p := []byte{0x10, byte(12 + len(clientID)), 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 60, 0, byte(len(clientID))}
	return append(p, clientID...)
}

// subackFor grants QoS 1 to every filter of a SUBSCRIBE body.
func subackFor(body []byte) []byte {
	ack := []byte{0x90, 0, body[0], body[1]}
	for i := 2; i+2 <= len(body); {
		i += 2 + (int(body[i])<<8 | int(body[i+1])) + 1
		ack = append(ack, 1)
	}
	ack[1] = byte(len(ack) - 2)
	return ack
}

// publishID is the offset of a QoS > 0 PUBLISH body's packet identifier.
func publishID(body []byte) int {
	return 2 + (int(body[0])<<8 | int(body[1]))
}

// nextID is the uplink's next packet identifier (never 0).
func nextID(id *uint16) uint16 {
	*id++
	if *id == 0 {
		*id = 1
	}
	return *id
}

// loopbackPort returns addr's port for the raw sockets (127.0.0.1 only:
// the floor is a loopback measurement).
func loopbackPort(addr string) (int, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	if host != "127.0.0.1" {
		return 0, fmt.Errorf("%s: -epoll listens and connects on 127.0.0.1 only", addr)
	}
	return strconv.Atoi(ps)
}
