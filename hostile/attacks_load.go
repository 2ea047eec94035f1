package main

// Attacks on the broker's state: subscriptions, retained messages, queues.

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
)

func alice(id string) login {
	return login{user: "alice", pass: users["alice"], clientID: id, clean: true}
}

func countCodes(codes []packet.ReasonCode) (granted, refused int64) {
	for _, c := range codes {
		if c.IsError() {
			refused++
		} else {
			granted++
		}
	}
	return
}

// subscription bomb: one client subscribes to 100,000 distinct filters in
// 100 SUBSCRIBEs, then leaves.
func attackSubscriptionBomb(ctx context.Context, addr string) outcome {
	c, _, err := dialMQTT(ctx, addr, alice("bomb"))
	if err != nil {
		return outcome{Err: err.Error()}
	}
	defer c.close()
	var granted, refused int64
	for p := 0; p < 100; p++ {
		filters := make([]string, 1000)
		for i := range filters {
			filters[i] = fmt.Sprintf("alice/bomb/%d/%d/+", p, i)
		}
		codes, err := c.subscribe(0, filters...)
		if err != nil {
			return outcome{Err: fmt.Sprintf("after %d filters: %v", granted+refused, err),
				Counts: map[string]int64{"granted": granted, "refused": refused}}
		}
		g, r := countCodes(codes)
		granted += g
		refused += r
	}
	return outcome{
		Note:   fmt.Sprintf("100,000 filters from one client: %d granted, %d refused", granted, refused),
		Counts: map[string]int64{"granted": granted, "refused": refused},
	}
}

// deep filters: one SUBSCRIBE with 16 filters of 60,000 levels each (under
// alice/, which the ACL lets her read), then the client leaves.
func attackDeepFilters(ctx context.Context, addr string) outcome {
	c, _, err := dialMQTT(ctx, addr, alice("deep"))
	if err != nil {
		return outcome{Err: err.Error()}
	}
	defer c.close()
	filters := make([]string, 16)
	for i := range filters {
		filters[i] = fmt.Sprintf("alice/%d", i) + strings.Repeat("/", 59998)
	}
	o := outcome{Counts: map[string]int64{}}
	codes, err := c.subscribe(0, filters...)
	if err != nil {
		// A broker may close the connection instead of answering.
		o.Note = fmt.Sprintf("16 filters x 60,000 levels: no SUBACK (%v)", err)
		o.Counts["closed"] = 1
		return o
	}
	g, r := countCodes(codes)
	o.Counts["granted"], o.Counts["refused"] = g, r
	o.Note = fmt.Sprintf("16 filters x 60,000 levels in one SUBSCRIBE: %d granted, %d refused", g, r)
	return o
}

// stuck subscriber: bob subscribes at QoS 1 and never reads (4 KiB socket
// buffer); four publishers flood it with 4 KiB QoS 1 messages for 6 s.
func attackStuckSubscriber(ctx context.Context, addr string) outcome {
	stuck, _, err := dialMQTT(ctx, addr, login{user: "bob", pass: users["bob"], clientID: "stuck", clean: true})
	if err != nil {
		return outcome{Err: err.Error()}
	}
	defer stuck.close()
	if _, err := stuck.subscribe(1, "bob/stuck/#"); err != nil {
		return outcome{Err: err.Error()}
	}
	stuck.nc.(*net.TCPConn).SetReadBuffer(4096)
	ctx, cancel := context.WithTimeout(ctx, 6*time.Second)
	defer cancel()
	var sent atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c, _, err := dialMQTT(ctx, addr, login{user: "bob", pass: users["bob"], clientID: fmt.Sprintf("flooder-%d", w), clean: true})
			if err != nil {
				return
			}
			defer c.close()
			go func() { // acks are read and dropped
				for {
					if _, err := c.read(); err != nil {
						return
					}
				}
			}()
			p := &packet.Publish{QoS: 1, Topic: "bob/stuck/x", Payload: make([]byte, 4096)}
			for ctx.Err() == nil {
				p.PacketID = c.nextID()
				c.nc.SetWriteDeadline(deadlineOf(ctx))
				if err := c.send(p); err != nil {
					return
				}
				sent.Add(1)
			}
		}(w)
	}
	wg.Wait()
	return outcome{
		Note:   fmt.Sprintf("4 publishers, 6 s, 4 KiB QoS 1 to a subscriber that never reads: %d sent (%.0f MiB)", sent.Load(), float64(sent.Load())*4096/(1<<20)),
		Counts: map[string]int64{"sent": sent.Load()},
	}
}

// retained flood: alice sets up to 20,000 retained 1 KiB messages on
// distinct topics (at most 5 s), then a new subscriber asks for them all.
func attackRetainedFlood(ctx context.Context, addr string) outcome {
	pub, _, err := dialMQTT(ctx, addr, alice("retainer"))
	if err != nil {
		return outcome{Err: err.Error()}
	}
	defer pub.close()
	flood, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p := &packet.Publish{Retain: true, Payload: make([]byte, 1024)}
	var n int64
	for ; n < 20000 && flood.Err() == nil; n++ {
		p.Topic = fmt.Sprintf("alice/ret/%d", n)
		pub.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if err := pub.send(p); err != nil {
			return outcome{Err: fmt.Sprintf("after %d: %v", n, err), Counts: map[string]int64{"published": n}}
		}
	}
	// A broker handles one connection's packets in order: once the PUBACK
	// of a last retained message is back, every retained message is set.
	// The subscriber then reads until it has them all or nothing comes for 3 s.
	if err := pub.publishAcked(fmt.Sprintf("alice/ret/%d", n), p.Payload, true); err != nil {
		return outcome{Err: err.Error(), Counts: map[string]int64{"published": n}}
	}
	n++
	sub, _, err := dialMQTT(ctx, addr, alice("ret-reader"))
	if err != nil {
		return outcome{Err: err.Error(), Counts: map[string]int64{"published": n}}
	}
	defer sub.close()
	start := time.Now()
	if _, err := sub.subscribe(0, "alice/ret/#"); err != nil {
		return outcome{Err: err.Error(), Counts: map[string]int64{"published": n}}
	}
	var got int64
	for got < n {
		sub.nc.SetReadDeadline(time.Now().Add(3 * time.Second))
		pk, err := sub.read()
		if err != nil {
			break
		}
		if pp, ok := pk.(*packet.Publish); ok && pp.Retain {
			got++
		}
	}
	el := time.Since(start)
	return outcome{
		Note:   fmt.Sprintf("%d retained 1 KiB messages set; a new subscriber got %d of them in %.1f s", n, got, el.Seconds()),
		Counts: map[string]int64{"published": n, "retained_received": got, "receive_ms": el.Milliseconds()},
	}
}
