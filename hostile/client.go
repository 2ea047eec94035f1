package main

// A minimal raw MQTT client over the project's codec. The hostile suite
// needs to write bytes no library would (partial packets, false lengths)
// next to ordinary sessions, so both go through net.Conn directly.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
)

// readMax is the largest packet this client accepts from a broker.
const readMax = 2 << 20

// errRefused is a CONNACK with a non-zero code.
var errRefused = errors.New("connack refused")

// Source addresses. Attack traffic comes from attackerIP, the well-behaved
// probe and the survival check from goodIP: like two hosts on a LAN, so a
// per-address defence (edgegw's login tarpit) is seen as a LAN would see it.
const (
	attackerIP = "127.0.0.2"
	goodIP     = "127.0.0.1"
)

// login is who a client says it is.
type login struct {
	user, pass string
	clientID   string
	clean      bool
	v          packet.Version
	from       string // source IP; "" = attackerIP
}

type client struct {
	nc  net.Conn
	br  *bufio.Reader
	v   packet.Version
	wmu sync.Mutex
	id  uint16 // next packet id; only used by the goroutine that publishes/subscribes
}

// connectPacket is the CONNECT for l (3.1.1 unless l.v says 5).
func connectPacket(l login) *packet.Connect {
	v := l.v
	if v == 0 {
		v = packet.V311
	}
	cp := &packet.Connect{Version: v, CleanStart: l.clean, KeepAlive: 60, ClientID: l.clientID}
	if l.user != "" {
		cp.UsernameFlag, cp.Username = true, l.user
		cp.PasswordFlag, cp.Password = true, []byte(l.pass)
	}
	if v == packet.V5 && !l.clean {
		cp.Props.SessionExpiry = 3600
		cp.Props.Set(packet.PropSessionExpiry)
	}
	return cp
}

// dialRaw opens a TCP connection from attackerIP.
func dialRaw(ctx context.Context, addr string) (net.Conn, error) {
	return dialFrom(ctx, addr, attackerIP)
}

// dialFrom binds the source address with IP_BIND_ADDRESS_NO_PORT, so the
// port is chosen at connect time per destination: without it a bind to
// port 0 needs a port free for every destination, and a flood of short
// connections runs out of them (TIME_WAIT) and measures the generator.
func dialFrom(ctx context.Context, addr, from string) (net.Conn, error) {
	d := net.Dialer{
		Timeout:   5 * time.Second,
		LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)},
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipBindAddressNoPort, 1)
			})
			if err != nil {
				return err
			}
			return serr
		},
	}
	return d.DialContext(ctx, "tcp", addr)
}

// ipBindAddressNoPort is IP_BIND_ADDRESS_NO_PORT (linux/in.h; not in package syscall).
const ipBindAddressNoPort = 24

// dialMQTT connects and completes CONNECT/CONNACK within 10 s. A refused
// CONNACK is returned with errRefused (and the CONNACK).
func dialMQTT(ctx context.Context, addr string, l login) (*client, *packet.Connack, error) {
	from := l.from
	if from == "" {
		from = attackerIP
	}
	nc, err := dialFrom(ctx, addr, from)
	if err != nil {
		return nil, nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	cp := connectPacket(l)
	c := &client{nc: nc, br: bufio.NewReaderSize(nc, 16<<10), v: cp.Version, id: 1}
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := c.send(cp); err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("write connect: %w", err)
	}
	p, err := c.read()
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("read connack: %w", err)
	}
	ca, ok := p.(*packet.Connack)
	if !ok {
		nc.Close()
		return nil, nil, fmt.Errorf("read connack: got %v", p.Type())
	}
	if ca.ReasonCode != 0 {
		nc.Close()
		return nil, ca, fmt.Errorf("%w: code %#x", errRefused, byte(ca.ReasonCode))
	}
	nc.SetDeadline(time.Time{})
	return c, ca, nil
}

func (c *client) send(p packet.Packet) error {
	b, err := packet.Append(nil, p, c.v)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err = c.nc.Write(b)
	return err
}

func (c *client) read() (packet.Packet, error) { return packet.Decode(c.br, c.v, readMax) }

func (c *client) close() { c.nc.Close() }

func (c *client) nextID() uint16 {
	id := c.id
	c.id++
	if c.id == 0 {
		c.id = 1
	}
	return id
}

// subscribe sends one SUBSCRIBE and waits for its SUBACK (other packets
// that arrive first are dropped), returning the reason codes.
func (c *client) subscribe(qos byte, filters ...string) ([]packet.ReasonCode, error) {
	s := &packet.Subscribe{PacketID: c.nextID()}
	for _, f := range filters {
		s.Subscriptions = append(s.Subscriptions, packet.Subscription{Filter: f, QoS: qos})
	}
	if err := c.send(s); err != nil {
		return nil, fmt.Errorf("write subscribe: %w", err)
	}
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.nc.SetReadDeadline(time.Time{})
	for {
		p, err := c.read()
		if err != nil {
			return nil, fmt.Errorf("read suback: %w", err)
		}
		if sa, ok := p.(*packet.Suback); ok && sa.PacketID == s.PacketID {
			return sa.ReasonCodes, nil
		}
	}
}

// publishAcked publishes at QoS 1 and waits for the PUBACK (dropping other
// packets), so anything the broker routes for it is routed when it returns.
func (c *client) publishAcked(topic string, payload []byte, retain bool) error {
	p := &packet.Publish{QoS: 1, PacketID: c.nextID(), Topic: topic, Payload: payload, Retain: retain}
	if err := c.send(p); err != nil {
		return fmt.Errorf("publish %s: %w", topic, err)
	}
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.nc.SetReadDeadline(time.Time{})
	for {
		r, err := c.read()
		if err != nil {
			return fmt.Errorf("puback for %s: %w", topic, err)
		}
		if a, ok := r.(*packet.Puback); ok && a.PacketID == p.PacketID {
			return nil
		}
	}
}

// closedWithin reads and discards until the peer closes (true) or d passes
// (false).
func closedWithin(nc net.Conn, d time.Duration) bool {
	nc.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 4096)
	for {
		if _, err := nc.Read(buf); err != nil {
			var ne net.Error
			return !(errors.As(err, &ne) && ne.Timeout())
		}
	}
}
