package session

// SetNextID sets where engine e looks next for a free packet id (a QoS 1
// publish whose own id is taken, a SUBSCRIBE): a test starts the look near
// 65535 to see it wrap, as a long-running engine's does.
func SetNextID(e *Engine, id uint16) {
	e.mu.Lock()
	e.nextID = id
	e.mu.Unlock()
}
