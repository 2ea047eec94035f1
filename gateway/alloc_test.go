package gateway

import "testing"

// A QoS 1 reading bridged upstream (its PUBACK deferred to the spool's
// group commit) and delivered to one local subscriber costs six
// allocations: the message and its payload, the subscriber's in-flight
// record, the publisher's ack queue, the sink's done, and the ack slot
// with its keep in one (ack.go). At a sensor fleet's rate the garbage of
// each reading is what sets how often the GC runs (issue 16); a change
// that adds to it fails here, and says which count it was.
func TestBridgedPublishAllocations(t *testing.T) {
	const want = 6
	r := newPublishRig(t, 1, 1, false, true)
	r.step(t) // the first step grows buffers that later ones reuse
	if got := testing.AllocsPerRun(200, func() { r.step(t) }); got > want {
		t.Fatalf("a bridged QoS 1 publish allocates %.1f objects, want at most %d (go test -bench PublishPathBridged -benchmem ./gateway/)", got, want)
	}
}
