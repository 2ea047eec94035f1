package bridge

// Coalesced acknowledgements (issue 16). The cloud broker answers a
// window of QoS 1/2 PUBLISHes, written in one batch, with one PUBACK or
// PUBREC each, and writes each as it gets to it: a few microseconds
// apart on a fast link, so the uplink's reader woke once per ack (paho's
// reader, the ack rewriter, the acker and the window's release: ~400
// wakeups a second for 500 readings). So after a batch that expects at
// least two acks the socket's receive low-water mark (SO_RCVLOWAT) is set
// to the bytes those acks take at least (4 each), and the reader is woken
// once, when they are all there.
//
// A broker may keep an ack back (a quota, a slow QoS 2 flow) or answer in
// fewer bytes than counted (it cannot: a PUBACK/PUBREC is never shorter
// than 4 bytes, in 3.1.1 and 5). So the mark is bounded in time: a timer
// lowers it back to 1 when the acks are not all there within the bound,
// twice the time the last set took to wake the reader (2 ms to 250 ms:
// a fast link waits microseconds, a 50 ms one 100 ms). A set that times
// out doubles the bound and turns coalescing off for the next 64
// batches, so a broker that keeps acks back costs a little latency once,
// not on every window.
// Only plain TCP sockets (sockio) take part: a TLS record is not an ack.

import (
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	// ackBytesMin is the smallest PUBACK/PUBREC: fixed header and packet id.
	ackBytesMin = 4
	// lowatMax caps the mark well below the socket's receive buffer and
	// the reader's block (readBlock).
	lowatMax = 2 << 10
	// lowatBoundMin and lowatBoundMax bound the wait for a set of acks.
	lowatBoundMin = 2 * time.Millisecond
	lowatBoundMax = 250 * time.Millisecond
	// lowatPause is how many batches go uncoalesced after a set timed out.
	lowatPause = 64
)

// ackCoalescer raises and lowers one socket's receive low-water mark.
// The batch writer raises it (armed) after a write; the reader lowers it
// when it woke (woke), the timer when the acks are late (expire).
type ackCoalescer struct {
	raw syscall.RawConn

	mu     sync.Mutex
	armed  bool // the mark is above 1
	since  time.Time
	bound  time.Duration
	pause  int // batches left uncoalesced after a timeout
	timer  *time.Timer
	closed bool
	sets   uint64 // marks raised (tests)
	expiry uint64 // sets that timed out (tests)
}

func newAckCoalescer(raw syscall.RawConn) *ackCoalescer {
	a := &ackCoalescer{raw: raw, bound: lowatBoundMin}
	a.timer = time.AfterFunc(time.Hour, a.expire)
	a.timer.Stop()
	return a
}

// expectAcks reports how many ack bytes packet p makes the broker send
// at least: a PUBLISH at QoS 1 or 2 is answered by a PUBACK or PUBREC.
func expectAcks(p []byte) int {
	if len(p) > 0 && p[0]>>4 == 3 && (p[0]>>1)&3 != 0 {
		return ackBytesMin
	}
	return 0
}

// arm raises the mark for a batch that expects ackBytes of answers.
// Called by the batch writer just before it writes the batch, so that no
// ack of it can come before the mark.
func (a *ackCoalescer) arm(ackBytes int) {
	if ackBytes < 2*ackBytesMin {
		return // one ack: nothing to coalesce
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	if a.armed {
		// The set before is not read yet: its mark and its timer stand.
		// The kernel signals readiness once, when the bytes reach the
		// mark, and checks it against the mark again when the poller
		// collects it (tcp_poll): a mark raised in between would drop
		// it, and that set's acks, all there, would wait for this
		// batch's or the timer (TestAckMarkNotRaisedOverAnUnreadSet).
		// Resetting the timer would also stretch that set's bound.
		return
	}
	if a.pause > 0 {
		a.pause--
		return
	}
	if !a.setLocked(min(ackBytes, lowatMax)) {
		return
	}
	if a.unreadLocked() {
		// Bytes came before the mark was raised (a PINGRESP, an inbound
		// PUBLISH, the ack of a batch of one): their wakeup may not be
		// collected yet, and the raised mark would drop it (see above).
		// Lowering it again signals them anew (tcp_set_rcvlowat); the
		// reader reads them at once anyway, and would lower the mark
		// (TestAckMarkNotRaisedOverUnreadBytes).
		a.setLocked(1)
		return
	}
	a.armed, a.since = true, time.Now()
	a.sets++
	a.timer.Reset(a.bound)
}

// woke lowers the mark once the reader has been woken (the acks are
// there, or something else is: a PINGRESP, an inbound PUBLISH, the end
// of the connection).
func (a *ackCoalescer) woke() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.armed {
		return
	}
	a.timer.Stop()
	a.armed = false
	a.setLocked(1)
	a.bound = min(max(2*time.Since(a.since), lowatBoundMin), lowatBoundMax)
}

// expire is the timer: the acks were not all there within the bound.
func (a *ackCoalescer) expire() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.armed || time.Since(a.since) < a.bound {
		// The reader woke first; or this is the timer of a set that
		// ended, started as woke stopped it, and a later set is armed
		// now with a timer of its own
		// (TestAckMarkStaleTimerLeavesTheNextSet).
		return
	}
	a.armed = false
	a.setLocked(1) // the ones that are there wake the reader now
	a.expiry++
	a.bound = min(2*a.bound, lowatBoundMax)
	a.pause = lowatPause
}

// setCount is how many times the mark was raised (tests).
func (a *ackCoalescer) setCount() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sets
}

// close stops the timer; the socket is closing.
func (a *ackCoalescer) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	a.armed = false
	a.timer.Stop()
}

// unreadLocked says whether the socket holds bytes not read yet (or
// cannot tell). Caller holds mu.
func (a *ackCoalescer) unreadLocked() bool {
	var n int32
	var errno syscall.Errno
	err := a.raw.Control(func(fd uintptr) {
		_, _, errno = syscall.RawSyscall(syscall.SYS_IOCTL, fd, unix.SIOCINQ, uintptr(unsafe.Pointer(&n)))
	})
	return err != nil || errno != 0 || n != 0
}

// setLocked sets the socket's SO_RCVLOWAT; false if it could not be set
// (the socket is closed). Caller holds mu.
func (a *ackCoalescer) setLocked(n int) bool {
	v := int32(n)
	var errno syscall.Errno
	err := a.raw.Control(func(fd uintptr) {
		_, _, errno = syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, fd, syscall.SOL_SOCKET, syscall.SO_RCVLOWAT,
			uintptr(unsafe.Pointer(&v)), unsafe.Sizeof(v), 0)
	})
	return err == nil && errno == 0
}
