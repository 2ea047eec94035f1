package gateway

import "sync/atomic"

// inboundFlows counts a v5 client's QoS 1/2 publishes that it may still
// consider unacknowledged, to hold it to the Receive Maximum the broker
// announced in CONNACK [MQTT-3.3.4-7]. A flow opens when its PUBLISH is read
// and closes when the broker queues its PUBACK, its PUBCOMP, or a PUBREC
// with an error code. The client only learns of an ack after it is queued,
// so this count never exceeds the client's own: a client that keeps to the
// window is never cut. Flows opened on an earlier connection are not
// counted (their PUBREL closes one of this connection's), which can only make the
// check more lenient, never stricter.
type inboundFlows struct {
	max  int          // the Receive Maximum announced; 0 = not checked (3.1/3.1.1)
	open atomic.Int32 // written by the reader and by sink verdicts
}

// done closes one flow; the count never goes below zero.
func (f *inboundFlows) done() {
	if f.max == 0 {
		return
	}
	for {
		v := f.open.Load()
		if v <= 0 || f.open.CompareAndSwap(v, v-1) {
			return
		}
	}
}
