package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// publisher is a local sensor of one gateway: QoS 1 messages numbered
// from 1, one per tick, each waited for (its PUBACK from the gateway is
// what "acknowledged locally" means). A message whose PUBACK does not
// come (the gateway was killed) is counted sent, not acknowledged, and
// the publisher connects again and goes on with the next number.
type publisher struct {
	gw       *gateway
	interval time.Duration

	mu     sync.Mutex
	sent   int
	acked  map[int]bool
	failed int // publishes whose PUBACK did not come
}

func newPublisher(gw *gateway, rate int) *publisher {
	return &publisher{gw: gw, interval: time.Second / time.Duration(rate), acked: map[int]bool{}}
}

func (p *publisher) topic() string { return "fleet/" + p.gw.clientID() }

func (p *publisher) connect() mqtt.Client {
	opts := mqtt.NewClientOptions().
		AddBroker(fmt.Sprintf("tcp://127.0.0.1:%d", p.gw.mqttPort)).
		SetClientID("pub-" + p.gw.id).
		SetCleanSession(true).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetConnectTimeout(2 * time.Second).
		SetKeepAlive(10 * time.Second)
	c := mqtt.NewClient(opts)
	tok := c.Connect()
	if !tok.WaitTimeout(3*time.Second) || tok.Error() != nil {
		c.Disconnect(0)
		return nil
	}
	return c
}

// run publishes until ctx ends.
func (p *publisher) run(ctx context.Context) {
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	var c mqtt.Client
	defer func() {
		if c != nil {
			c.Disconnect(100)
		}
	}()
	seq := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if c == nil {
			if c = p.connect(); c == nil {
				continue
			}
		}
		seq++
		p.mu.Lock()
		p.sent++
		p.mu.Unlock()
		tok := c.Publish(p.topic(), 1, false, fmt.Sprintf("%s %d", p.gw.id, seq))
		if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			p.mu.Lock()
			p.failed++
			p.mu.Unlock()
			c.Disconnect(0)
			c = nil
			continue
		}
		p.mu.Lock()
		p.acked[seq] = true
		p.mu.Unlock()
	}
}

// subscriber counts, at the cluster, every copy of every fleet message by
// (gateway, seq). A copy the node marks DUP is its own redelivery to this
// subscriber; one without is a second message the cluster took.
type subscriber struct {
	node *node

	mu        sync.Mutex
	copies    map[string]map[int]int // gateway id -> seq -> copies not marked DUP
	arrivals  map[string][]time.Time // gateway id -> when each new message came
	redeliv   int                    // copies marked DUP
	malformed int
	c         mqtt.Client
}

func newSubscriber(n *node) *subscriber {
	return &subscriber{node: n, copies: map[string]map[int]int{}, arrivals: map[string][]time.Time{}}
}

func (s *subscriber) handle(_ mqtt.Client, m mqtt.Message) {
	gw, seqs, ok := strings.Cut(string(m.Payload()), " ")
	seq, err := strconv.Atoi(seqs)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok || err != nil {
		s.malformed++
		return
	}
	if m.Duplicate() {
		s.redeliv++
		if s.copies[gw][seq] > 0 {
			return
		}
	}
	if s.copies[gw] == nil {
		s.copies[gw] = map[int]int{}
	}
	if s.copies[gw][seq] == 0 {
		s.arrivals[gw] = append(s.arrivals[gw], time.Now())
	}
	s.copies[gw][seq]++
}

// lastArrival is when the latest new message of gateway gw came.
func (s *subscriber) lastArrival(gw string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.arrivals[gw]; len(a) > 0 {
		return a[len(a)-1]
	}
	return time.Time{}
}

// longestGap is the longest time between two messages of gateway gw
// arriving, over the pairs whose later one came in [from, to].
func (s *subscriber) longestGap(gw string, from, to time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var gap time.Duration
	a := s.arrivals[gw]
	for i := 1; i < len(a); i++ {
		if a[i].Before(from) || a[i].After(to) {
			continue
		}
		gap = max(gap, a[i].Sub(a[i-1]))
	}
	return gap
}

// start connects with a session the node keeps (QoS 1 messages wait for
// it across a reconnect) and subscribes to every gateway's topic.
func (s *subscriber) start(runID string) error {
	opts := mqtt.NewClientOptions().
		AddBroker(s.node.mqttURL()).
		SetClientID("fleet-sub-" + s.node.name + "-" + runID).
		SetCleanSession(false).
		SetAutoReconnect(true).
		SetMaxReconnectInterval(time.Second).
		SetConnectTimeout(5 * time.Second).
		SetKeepAlive(10 * time.Second).
		SetOnConnectHandler(func(c mqtt.Client) {
			c.Subscribe("fleet/#", 1, s.handle)
		})
	c := mqtt.NewClient(opts)
	tok := c.Connect()
	if !tok.WaitTimeout(20*time.Second) || tok.Error() != nil {
		return fmt.Errorf("subscriber on %s: connect: %v", s.node.name, tok.Error())
	}
	// The subscription of the connect handler may still be on its way:
	// this one is waited for (a second SUBSCRIBE of the same filter only
	// replaces it).
	st := c.Subscribe("fleet/#", 1, s.handle)
	if !st.WaitTimeout(20*time.Second) || st.Error() != nil {
		return fmt.Errorf("subscriber on %s: subscribe: %v", s.node.name, st.Error())
	}
	s.c = c
	return nil
}

func (s *subscriber) stop() {
	if s.c != nil {
		s.c.Disconnect(200)
	}
}

// total is the number of distinct messages received.
func (s *subscriber) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.copies {
		n += len(m)
	}
	return n
}

// probeConnect connects a fresh client with a kept session (what a
// bridge's CONNECT asks of the cluster) to url until one is acknowledged
// or ctx ends; it returns when that was.
func probeConnect(ctx context.Context, url, id string) (time.Time, error) {
	for k := 0; ; k++ {
		opts := mqtt.NewClientOptions().
			AddBroker(url).
			SetClientID(fmt.Sprintf("%s-%d", id, k)).
			SetCleanSession(false).
			SetAutoReconnect(false).
			SetConnectTimeout(5 * time.Second)
		c := mqtt.NewClient(opts)
		tok := c.Connect()
		ok := tok.WaitTimeout(6*time.Second) && tok.Error() == nil
		at := time.Now()
		c.Disconnect(0)
		if ok {
			return at, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("probe %s: %w (last: %v)", url, ctx.Err(), tok.Error())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
