package gateway_test

// The sinks the tests attach (Server.AddSink): one whose verdicts the test
// releases, one that blocks its caller, one that keeps nothing.

import (
	"errors"
	"sync"

	"github.com/edgegw/edgegw/gateway"
)

// heldSink is an AsyncSink whose verdicts the test releases by hand, the
// way a bridge spool releases them after a group commit.
type heldSink struct {
	mu      sync.Mutex
	pending []func(error)
	topics  []string
}

func (h *heldSink) Accept(m *gateway.Message) error { return errors.New("sync path not expected") }

func (h *heldSink) AcceptAsync(m *gateway.Message, done func(error)) {
	h.mu.Lock()
	h.pending = append(h.pending, done)
	h.topics = append(h.topics, m.Topic)
	h.mu.Unlock()
}

func (h *heldSink) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.pending)
}

func (h *heldSink) release(i int, err error) {
	h.mu.Lock()
	done := h.pending[i]
	h.mu.Unlock()
	done(err)
}

// blockingSink is a synchronous Sink whose Accept waits until the test
// lets it go, as a sink that waits for a disk flush does (Sink: "Accept may
// wait"). It blocks the publisher's reader for as long as it waits.
type blockingSink struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *blockingSink) Accept(*gateway.Message) error {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-s.release
	return nil
}

func (s *blockingSink) let() { s.once.Do(func() { close(s.release) }) }

func newBlockingSink() *blockingSink {
	return &blockingSink{entered: make(chan struct{}, 1), release: make(chan struct{})}
}

// failingSink keeps nothing: every verdict is an error, from its own
// goroutine, as a spool's flusher would report a disk failure.
type failingSink struct{ wg sync.WaitGroup }

func (f *failingSink) Accept(*gateway.Message) error { return errors.New("disk full") }

func (f *failingSink) AcceptAsync(_ *gateway.Message, done func(error)) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		done(errors.New("disk full"))
	}()
}
