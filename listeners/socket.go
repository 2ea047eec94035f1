package listeners

import (
	"fmt"
	"net"
	"sync"
)

// socket is the bound TCP socket that the TCP and WebSocket listeners share:
// bound by Listen (before Serve, so the caller can report readiness only
// after every listener is bound), closed by Serve when its context ends or
// by Close when Serve never ran. Embedded, it gives both listeners the same
// Close and Addr.
type socket struct {
	mu sync.Mutex
	ln net.Listener
}

// listen binds address for the listener called name.
func (s *socket) listen(name, address string) error {
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return fmt.Errorf("listener %s: %w", name, err)
	}
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	return nil
}

// Close unbinds a listener that Listen bound but Serve never ran (a start
// that failed half-way); Serve closes its own listener when ctx ends.
func (s *socket) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Close()
}

// Addr returns the bound address (useful with port 0), nil before Listen.
func (s *socket) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}
