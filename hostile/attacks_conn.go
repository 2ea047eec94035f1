package main

// Attacks on the connection layer: connections that never finish
// CONNECT, lies about packet lengths, packets over the limit or against
// the rules, and floods of CONNECTs.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/gateway/packet/packettest"
)

// connectBytes is a valid CONNECT from bob with client id id.
func connectBytes(id string) []byte {
	b, err := packet.Append(nil, connectPacket(login{user: "bob", pass: users["bob"], clientID: id, clean: true}), packet.V311)
	if err != nil {
		panic(err) // a fixed, valid packet
	}
	return b
}

// varint is MQTT's Variable Byte Integer.
func varint(n int) []byte {
	var b []byte
	for {
		d := byte(n % 128)
		n /= 128
		if n > 0 {
			d |= 0x80
		}
		b = append(b, d)
		if n == 0 {
			return b
		}
	}
}

// heldConns is n connections each fed by feed for at most hold; it counts
// the ones the broker closed and when.
type heldConns struct {
	n, dialFailed int64
	closedAt      []time.Duration // since the connection was opened
}

func (h *heldConns) note(what string) string {
	closed := len(h.closedAt)
	s := fmt.Sprintf("%d/%d closed by the broker within the hold", closed, h.n-h.dialFailed)
	if closed > 0 {
		sort.Slice(h.closedAt, func(i, j int) bool { return h.closedAt[i] < h.closedAt[j] })
		s += fmt.Sprintf(" (median %.1f s, last %.1f s)", h.closedAt[closed/2].Seconds(), h.closedAt[closed-1].Seconds())
	}
	if h.dialFailed > 0 {
		s += fmt.Sprintf("; %d dials failed", h.dialFailed)
	}
	return what + ": " + s
}

func (h *heldConns) counts() map[string]int64 {
	c := map[string]int64{"conns": h.n, "dial_failed": h.dialFailed, "closed": int64(len(h.closedAt))}
	if len(h.closedAt) > 0 {
		c["close_median_ms"] = h.closedAt[len(h.closedAt)/2].Milliseconds()
		c["close_last_ms"] = h.closedAt[len(h.closedAt)-1].Milliseconds()
	}
	return c
}

// holdConns opens n connections and runs feed on each (feed returns when it
// has nothing more to write, ctx ends or closed is set) while a reader
// waits for the broker to close it; each connection is held at most hold
// from its opening, and closed by us only after its reader has finished.
func holdConns(ctx context.Context, addr string, n int, hold time.Duration, feed func(ctx context.Context, nc net.Conn, i int, closed *atomic.Bool)) *heldConns {
	h := &heldConns{n: int64(n)}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < n && ctx.Err() == nil; i++ {
		nc, err := dialRaw(ctx, addr)
		if err != nil {
			h.dialFailed++
			continue
		}
		opened := time.Now()
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var closed atomic.Bool
			fctx, cancel := context.WithDeadline(ctx, opened.Add(hold))
			fed := make(chan struct{})
			go func() { defer close(fed); feed(fctx, nc, i, &closed) }()
			if closedWithin(nc, time.Until(opened.Add(hold))) {
				closed.Store(true)
				mu.Lock()
				h.closedAt = append(h.closedAt, time.Since(opened))
				mu.Unlock()
			}
			cancel()
			<-fed
			nc.Close()
		}(i)
	}
	wg.Wait()
	return h
}

// pause waits d or until ctx ends (false).
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// slowloris: 400 connections each send a valid CONNECT one byte a second.
func attackSlowloris(ctx context.Context, addr string) outcome {
	h := holdConns(ctx, addr, 400, 12*time.Second, func(ctx context.Context, nc net.Conn, i int, closed *atomic.Bool) {
		b := connectBytes(fmt.Sprintf("slow-%d", i))
		for _, c := range b {
			if closed.Load() {
				return
			}
			nc.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := nc.Write([]byte{c}); err != nil {
				return
			}
			if !pause(ctx, time.Second) {
				return
			}
		}
	})
	return outcome{Note: h.note("400 CONNECTs at 1 byte/s, 12 s"), Counts: h.counts()}
}

// partial CONNECT: 400 connections send the first half of a CONNECT and
// nothing more.
func attackPartialConnect(ctx context.Context, addr string) outcome {
	h := holdConns(ctx, addr, 400, 12*time.Second, func(ctx context.Context, nc net.Conn, i int, closed *atomic.Bool) {
		b := connectBytes(fmt.Sprintf("half-%d", i))
		nc.SetWriteDeadline(time.Now().Add(time.Second))
		nc.Write(b[:len(b)/2])
	})
	return outcome{Note: h.note("400 half CONNECTs, 12 s"), Counts: h.counts()}
}

// length claims: 500 connections announce a CONNECT just under the packet
// size limit and send only its first bytes.
func attackLengthClaims(ctx context.Context, addr string) outcome {
	claim := maxPacketSize - 16
	head := append([]byte{0x10}, varint(claim)...)
	head = append(head, 0, 4, 'M', 'Q', 'T', 'T', 4, 0xC2, 0, 60)
	h := holdConns(ctx, addr, 500, 5*time.Second, func(ctx context.Context, nc net.Conn, i int, closed *atomic.Bool) {
		nc.SetWriteDeadline(time.Now().Add(time.Second))
		nc.Write(head)
	})
	return outcome{Note: h.note(fmt.Sprintf("500 CONNECTs claiming %d B, 10 sent, 5 s", claim)), Counts: h.counts()}
}

// oversize: packets over max_packet_size — PUBLISHes 1 byte and 1 MiB over
// the limit from an authorised client, and a CONNECT claiming the largest
// length MQTT can encode. A subscriber counts what got through.
func attackOversize(ctx context.Context, addr string) outcome {
	o := outcome{Counts: map[string]int64{}}
	sub, _, err := dialMQTT(ctx, addr, login{user: "alice", pass: users["alice"], clientID: "big-sub", clean: true})
	if err != nil {
		o.Err = err.Error()
		return o
	}
	defer sub.close()
	if _, err := sub.subscribe(0, "alice/big"); err != nil {
		o.Err = err.Error()
		return o
	}
	var delivered atomic.Int64
	go func() {
		for {
			p, err := sub.read()
			if err != nil {
				return
			}
			if pub, ok := p.(*packet.Publish); ok && len(pub.Payload) > 1000 {
				delivered.Add(1)
			}
		}
	}()
	var wg sync.WaitGroup
	var closedPub, closedClaim atomic.Int64
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, _, err := dialMQTT(ctx, addr, login{user: "alice", pass: users["alice"], clientID: fmt.Sprintf("big-%d", i), clean: true})
			if err != nil {
				return
			}
			defer c.close()
			over := 1
			if i%2 == 1 {
				over = 1 << 20
			}
			p := &packet.Publish{Topic: "alice/big"}
			p.Payload = make([]byte, maxPacketSize+over-packet.Size(p, packet.V311))
			b, _ := packet.Append(nil, p, packet.V311)
			c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
			go c.nc.Write(b) // the broker may close before it has read it all
			if closedWithin(c.nc, 5*time.Second) {
				closedPub.Add(1)
			}
		}(i)
	}
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := dialRaw(ctx, addr)
			if err != nil {
				return
			}
			defer nc.Close()
			nc.Write(append([]byte{0x10}, varint(268435455)...))
			if closedWithin(nc, 5*time.Second) {
				closedClaim.Add(1)
			}
		}()
	}
	wg.Wait()
	// Anything the broker accepted was routed before it closed the publisher;
	// a final acked publish from another client flushes the subscriber.
	if c, _, err := dialMQTT(ctx, addr, login{user: "alice", pass: users["alice"], clientID: "big-flush", clean: true}); err == nil {
		c.publishAcked("alice/flush", []byte("x"), false)
		c.close()
	}
	o.Counts["publish_over_closed"] = closedPub.Load()
	o.Counts["claim_256mib_closed"] = closedClaim.Load()
	o.Counts["delivered"] = delivered.Load()
	o.Note = fmt.Sprintf("10 PUBLISHes over 1 MiB (5 by 1 B, 5 by 1 MiB): %d/10 closed, %d delivered; 10 CONNECTs claiming 256 MiB: %d/10 closed",
		closedPub.Load(), delivered.Load(), closedClaim.Load())
	return o
}

// malformed: every invalid packet of the codec's golden set, each on its
// own connection (after a valid CONNECT at the case's version when the case
// is not about the first packet). Handled = the broker closed it within 3 s.
func attackMalformed(ctx context.Context, addr string) outcome {
	var wg sync.WaitGroup
	var handled, setupFailed atomic.Int64
	var mu sync.Mutex
	var open []string
	for i, bad := range packettest.Invalid {
		wg.Add(1)
		go func(i int, bad packettest.Bad) {
			defer wg.Done()
			var nc net.Conn
			if bad.Version == 0 {
				c, err := dialRaw(ctx, addr)
				if err != nil {
					setupFailed.Add(1)
					return
				}
				nc = c
			} else {
				c, _, err := dialMQTT(ctx, addr, login{user: "bob", pass: users["bob"], clientID: fmt.Sprintf("bad-%d", i), clean: true, v: bad.Version})
				if err != nil {
					setupFailed.Add(1)
					return
				}
				nc = c.nc
			}
			defer nc.Close()
			nc.SetWriteDeadline(time.Now().Add(2 * time.Second))
			nc.Write(bad.Bytes)
			if closedWithin(nc, 3*time.Second) {
				handled.Add(1)
				return
			}
			mu.Lock()
			open = append(open, bad.Name)
			mu.Unlock()
		}(i, bad)
	}
	wg.Wait()
	sort.Strings(open)
	n := int64(len(packettest.Invalid))
	o := outcome{Counts: map[string]int64{"cases": n, "closed": handled.Load(), "setup_failed": setupFailed.Load(), "left_open": int64(len(open))}}
	o.Note = fmt.Sprintf("%d/%d malformed cases closed within 3 s", handled.Load(), n)
	if len(open) > 0 {
		o.Note += fmt.Sprintf("; left open: %v", open)
	}
	if s := setupFailed.Load(); s > 0 {
		o.Note += fmt.Sprintf("; %d could not connect first", s)
	}
	return o
}

// connect flood: 16 workers connect and disconnect as alice (right
// password) for 5 s.
func attackConnectFlood(ctx context.Context, addr string) outcome {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var ok, refused, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				c, _, err := dialMQTT(ctx, addr, login{user: "alice", pass: users["alice"], clientID: fmt.Sprintf("flood-%d-%d", w, i), clean: true})
				switch {
				case err == nil:
					ok.Add(1)
					c.send(&packet.Disconnect{})
					c.close()
				case errors.Is(err, errRefused):
					refused.Add(1)
				case ctx.Err() == nil:
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}(w)
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	note := fmt.Sprintf("16 workers, 5 s: %d connects (%.0f/s), %d refused, %d failed", ok.Load(), float64(ok.Load())/el, refused.Load(), failed.Load())
	if e, ok := firstErr.Load().(string); ok {
		note += " (first: " + e + ")"
	}
	return outcome{
		Note:   note,
		Counts: map[string]int64{"connected": ok.Load(), "refused": refused.Load(), "failed": failed.Load()},
	}
}

// id ping-pong: two clients (both bob) take client id "pingpong" from each
// other for 5 s; each reconnects as soon as it is taken over. A CONNECT
// closed before its CONNACK is the bug of issue 13 point 7.
func attackPingPong(ctx context.Context, addr string) outcome {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var connects, connacks, noConnack, timeouts atomic.Int64
	b := connectBytes("pingpong")
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				nc, err := dialRaw(ctx, addr)
				if err != nil {
					continue
				}
				nc.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := nc.Write(b); err != nil {
					nc.Close()
					continue
				}
				connects.Add(1)
				hdr := make([]byte, 4)
				_, err = io.ReadFull(nc, hdr)
				var ne net.Error
				switch {
				case err == nil && hdr[0] == 0x20:
					connacks.Add(1)
					closedWithin(nc, time.Until(deadlineOf(ctx)))
				case errors.As(err, &ne) && ne.Timeout():
					timeouts.Add(1)
				case err != nil:
					noConnack.Add(1)
				}
				nc.Close()
			}
		}()
	}
	wg.Wait()
	return outcome{
		Note: fmt.Sprintf("5 s: %d CONNECTs, %d CONNACKs, %d closed with no CONNACK, %d unanswered after 5 s",
			connects.Load(), connacks.Load(), noConnack.Load(), timeouts.Load()),
		Counts: map[string]int64{"connects": connects.Load(), "connacks": connacks.Load(), "no_connack": noConnack.Load(), "timeouts": timeouts.Load()},
	}
}

func deadlineOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(5 * time.Second)
}

// wrong-password flood: 32 workers log in as bob with a wrong password for
// 6 s, each waiting for its answer (at most 15 s).
func attackWrongPassword(ctx context.Context, addr string) outcome {
	flood, cancel := context.WithTimeout(ctx, 6*time.Second)
	defer cancel()
	var refused, accepted, closedNoAck, timeouts atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; flood.Err() == nil; i++ {
				c, _, err := dialMQTT(ctx, addr, login{user: "bob", pass: "wrong", clientID: fmt.Sprintf("guess-%d-%d", w, i), clean: true})
				var ne net.Error
				switch {
				case err == nil:
					accepted.Add(1)
					c.close()
				case errors.Is(err, errRefused):
					refused.Add(1)
				case errors.As(err, &ne) && ne.Timeout():
					timeouts.Add(1)
				default:
					closedNoAck.Add(1)
				}
			}
		}(w)
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	// The right password from the attacker's own address, right after: a
	// per-address tarpit makes it wait; the time is reported, capped at 10 s.
	t := time.Now()
	sameHost := "served"
	if c, _, err := dialMQTT(ctx, addr, login{user: "bob", pass: users["bob"], clientID: "after-flood", clean: true}); err != nil {
		sameHost = "not served: " + err.Error()
	} else {
		c.close()
	}
	sameMs := time.Since(t).Milliseconds()
	return outcome{
		Note: fmt.Sprintf("32 workers, 6 s: %d refused with a CONNACK (%.0f/s over %.1f s), %d closed without one, %d unanswered in 10 s, %d accepted; then bob's right password from the attacker's address: %s after %.1f s",
			refused.Load(), float64(refused.Load())/el, el, closedNoAck.Load(), timeouts.Load(), accepted.Load(), sameHost, float64(sameMs)/1000),
		Counts: map[string]int64{"refused": refused.Load(), "closed_no_connack": closedNoAck.Load(), "timeouts": timeouts.Load(), "accepted": accepted.Load(), "same_host_login_ms": sameMs},
	}
}
