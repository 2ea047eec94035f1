package gateway

import (
	"testing"
	"time"
)

// TestWithheldFrontIsNotMoreWork: a queue whose front message waits for
// its verdict (a bridged reading before the spool's group commit) has
// nothing sendable, and takeSendable must not report more work: the
// writer would come straight back for it and spin until the verdict
// (a sensor fleet's local subscriber kept a core busy that way). The
// verdict wakes the writer instead, and the message then goes.
func TestWithheldFrontIsNotMoreWork(t *testing.T) {
	for _, qos := range []byte{1, 2} {
		r := newPublishRig(t, 1, qos, false, true)
		pk, err := r.pub.decodeNext(0)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.pub.handle(pk); err != nil {
			t.Fatal(err)
		}
		c := r.readers[0]
		out, rel, more := c.sess.takeSendable(c, c.window, time.Now(), maxBatch, nil)
		releaseWaiters(rel)
		if len(out) != 0 || more {
			t.Fatalf("QoS %d, verdict pending: %d sendable, more %v; want 0, false", qos, len(out), more)
		}
		c.wmu.Lock()
		c.dirty = false
		c.wmu.Unlock()
		r.sink.commit() // the verdict: kept
		c.wmu.Lock()
		woken := c.dirty
		c.wmu.Unlock()
		if !woken {
			t.Fatalf("QoS %d: the verdict did not wake the subscriber's writer", qos)
		}
		out, rel, more = c.sess.takeSendable(c, c.window, time.Now(), maxBatch, nil)
		releaseWaiters(rel)
		if len(out) != 1 || more {
			t.Fatalf("QoS %d, kept: %d sendable, more %v; want 1, false", qos, len(out), more)
		}
	}
}
