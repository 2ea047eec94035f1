package gateway

// Draining reports whether the session of client id has begun its
// shutdown drain (drain.go): from then on it sends nothing new. For
// gateway_test, which has no other way to know the drain has begun.
func Draining(s *Server, id string) bool {
	s.reg.mu.Lock()
	sess := s.reg.sessions[id]
	s.reg.mu.Unlock()
	if sess == nil {
		return false
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.drainFor != nil && sess.drainFor == sess.conn
}
