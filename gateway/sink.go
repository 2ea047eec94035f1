package gateway

// Sinks: in-process consumers of messages (a bridge's spool), matched by
// filter in their own topic tree and given each message on the publisher's
// path (routeKept).

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/gateway/topics"
)

// Sink is an in-process consumer of messages, such as a bridge's spool. It is
// called on the publisher's path, before the publisher is acknowledged, so a
// QoS 1/2 message acknowledged locally is already in the sink. Accept must be
// safe for concurrent use and must not call back into the Server's routing.
type Sink interface {
	// Accept takes the message. An error means it could not be kept; the
	// publisher is then not acknowledged as successful.
	Accept(m *Message) error
}

// AsyncSink is a Sink that can report durability later. AcceptAsync must not
// wait for I/O completion: it stores the message (e.g. appends it to the
// spool's file) and calls done exactly once, from any goroutine, when the
// message is durable (err == nil) or could not be kept (err != nil). done is
// cheap and never blocks. Calls for one sink are made in the order the
// gateway accepted the messages; done calls may come in any order. The
// publisher's acknowledgement waits for done, the publisher's connection
// does not: its pings and other packets carry on meanwhile.
type AsyncSink interface {
	Sink
	AcceptAsync(m *Message, done func(error))
}

type sinkEntry struct {
	name string
	sink Sink
}

// sinkSet holds the sinks by filter in their own tree, so the bridges' rules
// are matched the same way as subscriptions.
// The tree is made on first use; sinks are added while traffic flows (a
// reload adds a bridge's rules), so it is published atomically.
type sinkSet struct {
	tree atomic.Pointer[topics.Tree[sinkEntry]]
	once sync.Once
}

func (ss *sinkSet) t() *topics.Tree[sinkEntry] {
	ss.once.Do(func() { ss.tree.Store(topics.NewTree[sinkEntry]()) })
	return ss.tree.Load()
}

// AddSink registers sink under name for messages matching filter. Messages
// whose Origin is "$bridge/<name>" are never given back to the same sink
// (loop prevention). A sink may be added for several filters; a message
// matching more than one is given once.
func (s *Server) AddSink(name, filter string, sink Sink) error {
	if err := packet.ValidTopicFilter(filter); err != nil {
		return fmt.Errorf("sink %s: filter %q: %w", name, filter, err)
	}
	s.sinks.t().Add(filter, name, sinkEntry{name: name, sink: sink})
	return nil
}

// RemoveSink removes name's registration for filter.
func (s *Server) RemoveSink(name, filter string) { s.sinks.t().Remove(filter, name) }

// BridgeOrigin is the Origin of a message that entered through bridge name.
func BridgeOrigin(name string) string { return "$bridge/" + name }

// active reports whether any sink is registered.
func (ss *sinkSet) active() bool {
	t := ss.tree.Load()
	return t != nil && t.Len() > 0
}

// deliver hands m to every matching sink and returns how many took it.
func (ss *sinkSet) deliver(m *Message, h *keeper) (int, error) {
	if !ss.active() {
		return 0, nil
	}
	var buf [4]sinkEntry
	picked := buf[:0]
	ss.t().Match(m.Topic, func(_, name string, e sinkEntry) {
		for _, p := range picked {
			if p.name == name {
				return
			}
		}
		if m.Origin == BridgeOrigin(name) {
			return
		}
		picked = append(picked, e)
	})
	// Accept may wait for a disk flush: call it outside the tree's lock.
	var errs []error
	for _, e := range picked {
		if as, ok := e.sink.(AsyncSink); ok {
			if k := h.get(); k != nil {
				k.left.Add(1)
				hd := h.hold
				hd.add()
				name := e.name
				as.AcceptAsync(m, func(err error) {
					hd.done(err, nil) // the copies go, or are taken back, before the ack
					k.finish(name, err)
				})
				continue
			}
			// Nobody waits for this message's verdict (QoS 0, wills,
			// in-process publishers): never wait for the disk either.
			as.AcceptAsync(m, func(error) {})
			continue
		}
		accept := func() error { return e.sink.Accept(m) }
		var err error
		if h.from != nil {
			err = h.from.unheld(accept) // Accept may wait: the reader's writes do not (writer.go)
		} else {
			err = accept()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("sink %s: %w", e.name, err))
		}
	}
	return len(picked), errors.Join(errs...)
}
