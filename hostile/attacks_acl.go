package main

// ACL leaks (issue 13 points 1-3): can a client read or write what the ACL
// keeps from it? Every check ends on a marker message that the watching
// client may read, published after the forbidden one (by the same client,
// or by another once the forbidden one was acknowledged, i.e. routed), so
// "nothing arrived" is decided by the marker, not by a timer.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
)

// collector reads a client's deliveries (acking QoS 1) into topics.
type collector struct {
	c      *client
	topics chan string
}

func collect(c *client) *collector {
	k := &collector{c: c, topics: make(chan string, 1024)}
	go func() {
		defer close(k.topics)
		for {
			p, err := c.read()
			if err != nil {
				return
			}
			pub, ok := p.(*packet.Publish)
			if !ok {
				continue
			}
			if pub.QoS == 1 {
				c.send(&packet.Puback{PacketID: pub.PacketID})
			}
			select {
			case k.topics <- pub.Topic:
			default:
			}
		}
	}()
	return k
}

// until returns the topics received before marker (found) or before d passed.
func (k *collector) until(marker string, d time.Duration) (seen []string, found bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case topic, ok := <-k.topics:
			if !ok {
				return seen, false
			}
			if topic == marker {
				return seen, true
			}
			seen = append(seen, topic)
		case <-t.C:
			return seen, false
		}
	}
}

// aclCheck accumulates the ACL attack's findings.
type aclCheck struct {
	ctx   context.Context
	addr  string
	leaks []string
	notes []string
}

func (a *aclCheck) note(format string, args ...any) {
	a.notes = append(a.notes, fmt.Sprintf(format, args...))
}
func (a *aclCheck) leak(format string, args ...any) {
	a.leaks = append(a.leaks, fmt.Sprintf(format, args...))
}

func (a *aclCheck) dial(user, id string, clean bool) (*client, *packet.Connack, error) {
	return dialMQTT(a.ctx, a.addr, login{user: user, pass: users[user], clientID: id, clean: clean})
}

func (a *aclCheck) mustDial(user, id string) *client {
	c, _, err := a.dial(user, id, true)
	if err != nil {
		a.note("%s/%s could not connect: %v", user, id, err)
		return nil
	}
	return c
}

// hasPrefix returns the distinct topics starting with one of prefixes, each
// with how many times it was received ("bob/x" or "bob/probe (x140)").
func hasPrefix(topics []string, prefixes ...string) []string {
	var out []string
	n := map[string]int{}
	for _, t := range topics {
		for _, p := range prefixes {
			if strings.HasPrefix(t, p) {
				if n[t] == 0 {
					out = append(out, t)
				}
				n[t]++
				break
			}
		}
	}
	for i, t := range out {
		if n[t] > 1 {
			out[i] = fmt.Sprintf("%s (x%d)", t, n[t])
		}
	}
	return out
}

// wildcardOverDeny: alice subscribes shared/+/x, shared/secret/# and #;
// bob (not allowed) and ops (allowed) publish shared/secret/x, bob also
// bob/private; alice must get none of it. Then alice publishes into
// shared/secret/ (denied) while ops listens on shared/#.
func (a *aclCheck) wildcardOverDeny() {
	sub := a.mustDial("alice", "acl-alice-sub")
	bob := a.mustDial("bob", "acl-bob")
	ops := a.mustDial("ops", "acl-ops")
	alicePub := a.mustDial("alice", "acl-alice-pub")
	opsSub := a.mustDial("ops", "acl-ops-sub")
	for _, c := range []*client{sub, bob, ops, alicePub, opsSub} {
		if c == nil {
			return
		}
		defer c.close()
	}
	codes, err := sub.subscribe(1, "shared/+/x", "shared/secret/#", "#", "shared/marker")
	if err != nil {
		a.note("alice subscribe: %v", err)
		return
	}
	a.note("alice SUBACK [shared/+/x shared/secret/# # shared/marker] = %v", codes)
	if _, err := opsSub.subscribe(1, "shared/#"); err != nil {
		a.note("ops subscribe: %v", err)
		return
	}
	alice, opsK := collect(sub), collect(opsSub)
	if err := bob.publishAcked("shared/secret/x", []byte("bob-secret"), false); err != nil {
		a.note("bob publish shared/secret/x: %v", err)
	}
	if err := bob.publishAcked("bob/private", []byte("bob-private"), false); err != nil {
		a.note("bob publish bob/private: %v", err)
	}
	if err := ops.publishAcked("shared/secret/x", []byte("ops-secret"), false); err != nil {
		a.note("ops publish shared/secret/x: %v", err)
	}
	if err := ops.publishAcked("shared/marker", []byte("m"), false); err != nil {
		a.note("ops publish marker: %v", err)
	}
	seen, found := alice.until("shared/marker", 5*time.Second)
	if !found {
		a.note("alice never got the marker")
	}
	for _, t := range hasPrefix(seen, "shared/secret/", "bob/") {
		a.leak("alice (subscribed shared/+/x, shared/secret/#, #) received %s", t)
	}
	if err := alicePub.publishAcked("shared/secret/y", []byte("alice-secret"), false); err != nil {
		a.note("alice publish shared/secret/y: %v", err)
	}
	if err := alicePub.publishAcked("shared/marker", []byte("m"), false); err != nil {
		a.note("alice publish marker: %v", err)
	}
	seen, found = opsK.until("shared/marker", 5*time.Second)
	if !found {
		a.note("ops never got alice's marker")
	}
	for _, t := range hasPrefix(seen, "shared/secret/y") {
		a.leak("alice published %s (denied) and ops received it", t)
	}
}

// wildcardClientIDs: alice with client id "+" reads clients/bobdev/secret
// through "pattern readwrite clients/%c/#"? With id "#" writes
// clients/bobdev/cmd?
func (a *aclCheck) wildcardClientIDs() {
	// Client id "+".
	plus, _, err := a.dial("alice", "+", true)
	if err != nil {
		a.note("alice with id + refused: %v", err)
	} else {
		func() {
			defer plus.close()
			bobdev, ops := a.mustDial("bob", "bobdev"), a.mustDial("ops", "acl-ops")
			if bobdev == nil || ops == nil {
				return
			}
			defer bobdev.close()
			defer ops.close()
			codes, err := plus.subscribe(1, "clients/+/secret", "clients/#", "shared/marker")
			if err != nil {
				a.note("alice(+) subscribe: %v", err)
				return
			}
			a.note("alice(+) SUBACK [clients/+/secret clients/# shared/marker] = %v", codes)
			k := collect(plus)
			if err := bobdev.publishAcked("clients/bobdev/secret", []byte("s"), false); err != nil {
				a.note("bobdev publish: %v", err)
			}
			ops.publishAcked("shared/marker", []byte("m"), false)
			seen, found := k.until("shared/marker", 5*time.Second)
			if !found {
				a.note("alice(+) never got the marker")
			}
			for _, t := range hasPrefix(seen, "clients/bobdev/") {
				a.leak("alice with client id + received %s", t)
			}
		}()
	}
	// Client id "#".
	hash, _, err := a.dial("alice", "#", true)
	if err != nil {
		a.note("alice with id # refused: %v", err)
		return
	}
	defer hash.close()
	bobdev, bob2 := a.mustDial("bob", "bobdev"), a.mustDial("bob", "acl-bob-marker")
	if bobdev == nil || bob2 == nil {
		return
	}
	defer bobdev.close()
	defer bob2.close()
	if _, err := bobdev.subscribe(1, "clients/bobdev/cmd", "bob/marker"); err != nil {
		a.note("bobdev subscribe: %v", err)
		return
	}
	k := collect(bobdev)
	if err := hash.publishAcked("clients/bobdev/cmd", []byte("reboot"), false); err != nil {
		a.note("alice(#) publish clients/bobdev/cmd: %v", err)
	}
	bob2.publishAcked("bob/marker", []byte("m"), false)
	seen, found := k.until("bob/marker", 5*time.Second)
	if !found {
		a.note("bobdev never got the marker")
	}
	for _, t := range hasPrefix(seen, "clients/bobdev/cmd") {
		a.leak("alice with client id # published %s and bobdev received it", t)
	}
}

// sessionTakeover: bob leaves a persistent session "bob-device" with a
// message queued; alice connects with that client id.
func (a *aclCheck) sessionTakeover() {
	dev, _, err := a.dial("bob", "bob-device", false)
	if err != nil {
		a.note("bob-device connect: %v", err)
		return
	}
	if _, err := dev.subscribe(1, "bob/#"); err != nil {
		a.note("bob-device subscribe: %v", err)
		dev.close()
		return
	}
	dev.send(&packet.Disconnect{})
	closedWithin(dev.nc, 2*time.Second)
	dev.close()
	pub := a.mustDial("bob", "acl-bob-pub")
	if pub == nil {
		return
	}
	defer pub.close()
	if err := pub.publishAcked("bob/x", []byte("queued"), false); err != nil {
		a.note("bob publish bob/x: %v", err)
	}
	thief, ca, err := a.dial("alice", "bob-device", false)
	if err != nil {
		a.note("alice with id bob-device refused: %v", err)
		return
	}
	defer thief.close()
	if ca.SessionPresent {
		a.leak("alice connected as bob-device and got bob's session (session present)")
	}
	k := collect(thief)
	pub.publishAcked("bob/live", []byte("live"), false)
	// Alice has no marker she may read on bob's topics; the window is a
	// bounded wait after both messages were routed.
	seen, _ := k.until("", 1500*time.Millisecond)
	for _, t := range hasPrefix(seen, "bob/") {
		a.leak("alice connected as bob-device and received %s", t)
	}
}

func attackACL(ctx context.Context, addr string) outcome {
	a := &aclCheck{ctx: ctx, addr: addr}
	a.wildcardOverDeny()
	a.wildcardClientIDs()
	a.sessionTakeover()
	return outcome{
		Note:        strings.Join(a.notes, "; "),
		LeakChecked: true,
		Leaks:       a.leaks,
		Counts:      map[string]int64{"leaks": int64(len(a.leaks))},
	}
}
