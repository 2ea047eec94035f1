package bridge

// Design note: SUBSCRIBE and UNSUBSCRIBE ids on the wire (MQTT 3.1.1).
// paho numbers them from its own id space, which knows nothing of the
// wire ids the publish flows carry (wireid.go): after a reconnect with
// unacknowledged publishes, paho's next id is often the wire id of one of
// them (ten acked, ten in flight: paho re-sends the ten under its ids
// 1-10 rewritten to wire ids 11-20, and the SUBSCRIBE that follows takes
// paho's 11). A client must give a new SUBSCRIBE a packet id no other
// exchange of its uses [MQTT-2.3.1-2](3.1.1). So the connection rewrites
// these too: a SUBSCRIBE or UNSUBSCRIBE goes out under a wire id no
// publish flow and no other request holds, its SUBACK or UNSUBACK comes
// back to paho under paho's id, and a QoS 2 publish whose own wire id a
// request holds waits for the answer (pickWire). A request holds its id
// until its answer or the connection's end: paho fails a request the
// connection did not answer, and the bridge subscribes again on the next.

// request is a SUBSCRIBE or UNSUBSCRIBE on the wire.
type request struct {
	pid  uint16        // paho's packet id
	done chan struct{} // closed at its answer or the connection's end
}

// Packet types of the requests and their answers.
const (
	typeSubscribe   = 8
	typeSuback      = 9
	typeUnsubscribe = 10
	typeUnsuback    = 11
)

// requestWire gives paho's request pid a wire id no flow and no other
// request holds (0: none free; never, as the window holds far fewer).
// The id of the publish the sender is starting is taken too: from
// pickWire until Put files it under s.wire, it is s.picked, then
// s.next's (paho may write a reload's SUBSCRIBE in between).
func (s *uplinkStore) requestWire(pid uint16) uint16 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range 65535 {
		s.reqNext = s.reqNext%65535 + 1
		w := s.reqNext
		if w == s.picked || (s.next != nil && s.next.wire == w) {
			continue
		}
		if s.wire[w] == nil && s.reqs[w] == nil {
			s.reqs[w] = &request{pid: pid, done: make(chan struct{})}
			return w
		}
	}
	return 0
}

// answered ends the request under wire id w and returns paho's id for its
// answer. An id no request holds (a broker's stray answer) becomes 0,
// which paho never uses: paho completes whatever token its id names and
// frees the id, so an unknown id passed on could complete a publish's
// token and let paho reuse that publish's id (as wireid.go drops unknown
// acks).
func (s *uplinkStore) answered(w uint16) uint16 {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.reqs[w]
	if r == nil {
		return 0
	}
	delete(s.reqs, w)
	close(r.done)
	return r.pid
}

// requestWait reports whether busy, a channel pickWire returned, is a
// request's: a wait on it is bounded by ack_timeout (waitForID), a wait
// on a flow is not.
func (s *uplinkStore) requestWait(busy <-chan struct{}) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.reqs {
		if r.done == busy {
			return true
		}
	}
	return false
}

// dropRequests ends every request of the connection that ended: paho
// failed them, and their ids are free again.
func (s *uplinkStore) dropRequests() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w, r := range s.reqs {
		delete(s.reqs, w)
		close(r.done)
	}
}

// rewriteRequest rewrites paho's packet id in p to a wire id if p is
// exactly one SUBSCRIBE or UNSUBSCRIBE (one Write per packet, as paho
// writes them).
func rewriteRequest(st *uplinkStore, p []byte) {
	rl, hl := remainingLength(p)
	if hl == 0 || hl+rl != len(p) || rl < 2 {
		return
	}
	pid := uint16(p[hl])<<8 | uint16(p[hl+1])
	if w := st.requestWire(pid); w != 0 {
		p[hl], p[hl+1] = byte(w>>8), byte(w)
	}
}
