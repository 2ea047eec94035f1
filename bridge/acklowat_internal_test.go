package bridge

import (
	"io"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgegw/edgegw/bridge/spool"
	"github.com/edgegw/edgegw/internal/sockio"
)

// lowatPair is a real 127.0.0.1 connection: the uplink's end with its
// coalescer, and the broker's end.
func lowatPair(t *testing.T) (a *ackCoalescer, fd int, broker net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	broker, err = l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { broker.Close() })
	raw := rawSocket(c)
	raw.Control(func(f uintptr) { fd = int(f) })
	a = newAckCoalescer(raw)
	t.Cleanup(a.close)
	return a, fd, broker
}

// queued waits until the uplink's socket holds n bytes (they crossed
// loopback), then says whether a poll finds it readable: what wakes the
// reader in the Go poller.
func queued(t *testing.T, fd, n int) (readable bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
		if err != nil {
			t.Fatal(err)
		}
		if got == n {
			break
		}
		if got > n || time.Now().After(deadline) {
			t.Fatalf("%d bytes queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if _, err := unix.Poll(p, 0); err != nil {
		t.Fatal(err)
	}
	return p[0].Revents&unix.POLLIN != 0
}

// After a batch of ten QoS 1 PUBLISHes the reader is woken once, when
// the tenth PUBACK is there, not at the first (acklowat.go); once woken
// the mark is back to 1 byte, so a PINGRESP alone wakes it.
func TestAckMarkWakesReaderOnceForTheBatch(t *testing.T) {
	a, fd, broker := lowatPair(t)
	a.bound = time.Hour // this test does not time out; TestAckMarkExpires does
	a.arm(10 * expectAcks([]byte{0x32}))
	puback := []byte{0x40, 0x02, 0x00, 0x01}
	for i := 1; i <= 10; i++ {
		if _, err := broker.Write(puback); err != nil {
			t.Fatal(err)
		}
		if r := queued(t, fd, 4*i); r != (i == 10) {
			t.Fatalf("after %d of 10 PUBACKs the socket is readable: %v", i, r)
		}
	}
	a.woke()
	buf := make([]byte, 64)
	if n, err := syscall.Read(fd, buf); n != 40 || err != nil {
		t.Fatalf("read %d, %v", n, err)
	}
	if _, err := broker.Write([]byte{0xd0, 0x00}); err != nil { // PINGRESP
		t.Fatal(err)
	}
	if !queued(t, fd, 2) {
		t.Fatal("a PINGRESP after the batch does not wake the reader: the mark was not lowered")
	}
}

// A batch with one ack, or no QoS 1/2 PUBLISH, does not raise the mark.
func TestAckMarkOnlyForTwoAcksOrMore(t *testing.T) {
	a, fd, broker := lowatPair(t)
	if expectAcks([]byte{0x30}) != 0 || expectAcks([]byte{0xc0}) != 0 || expectAcks([]byte{0x34}) != 4 {
		t.Fatal("expectAcks counts a QoS 0 PUBLISH or a PINGREQ, or misses a QoS 2 PUBLISH")
	}
	a.arm(ackBytesMin)
	broker.Write([]byte{0x40, 0x02, 0x00, 0x01})
	if !queued(t, fd, 4) || a.sets != 0 {
		t.Fatal("one PUBACK does not wake the reader")
	}
}

// A broker that keeps an ack back: when the bound passes, the mark is
// lowered and the acks that are there wake the reader; the bound doubles
// and the next lowatPause batches are not coalesced. The timer's
// function is called here rather than waited for.
func TestAckMarkExpires(t *testing.T) {
	a, fd, broker := lowatPair(t)
	a.bound = time.Hour
	a.arm(3 * ackBytesMin)
	broker.Write([]byte{0x40, 0x02, 0x00, 0x01, 0x40, 0x02, 0x00, 0x02})
	if queued(t, fd, 8) {
		t.Fatal("two of three PUBACKs woke the reader")
	}
	a.mu.Lock()
	a.since = time.Now().Add(-a.bound) // the bound has passed
	a.mu.Unlock()
	a.expire()
	if !queued(t, fd, 8) {
		t.Fatal("the expired mark still holds the two PUBACKs back")
	}
	if a.expiry != 1 || a.bound != lowatBoundMax || a.pause != lowatPause {
		t.Fatalf("after the timeout: expiry %d, bound %v, pause %d", a.expiry, a.bound, a.pause)
	}
	if n, err := syscall.Read(fd, make([]byte, 64)); n != 8 || err != nil {
		t.Fatalf("read %d, %v", n, err)
	}
	sets := a.sets
	for range lowatPause {
		a.arm(10 * ackBytesMin)
	}
	if a.sets != sets {
		t.Fatal("batches coalesced during the pause after a timeout")
	}
	a.arm(10 * ackBytesMin)
	if a.sets != sets+1 {
		t.Fatal("coalescing did not resume after the pause")
	}
	a.mu.Lock()
	a.since = time.Now().Add(-3 * time.Millisecond) // the set took 3 ms
	a.mu.Unlock()
	a.woke()
	if a.bound < 6*time.Millisecond || a.bound >= lowatBoundMax {
		t.Fatalf("a set that took 3 ms leaves the bound at %v, want twice that", a.bound)
	}
}

// The uplink's connection raises the mark for a batch it writes and
// lowers it when its reader has read (batchwrite.go, conn.go): the
// coalescer is wired in, not only correct.
func TestUplinkConnRaisesAndLowersTheMark(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	broker, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	raw := rawSocket(c)
	var lastRead atomic.Int64
	dc := &deadlineConn{Conn: c, raw: raw, lastRead: &lastRead,
		w: newBatchWriter(c, raw, 5*time.Second, func(error) {})}
	defer dc.Close()
	dc.w.acks.bound = time.Hour
	mark := func() int {
		var v int
		var gerr error
		raw.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT) })
		if gerr != nil {
			t.Fatal(gerr)
		}
		return v
	}
	// Five PUBLISHes written one by one: the flusher may take them in more
	// than one batch (it runs as they come), so the writes are repeated
	// until a batch of two or more was written.
	publish := appendPublish311(nil, spool.Message{Topic: "t", Payload: []byte("x"), QoS: 1}, 7)
	sent := 0
	for round := 0; dc.w.acks.setCount() == 0; round++ {
		if round == 100 {
			t.Fatal("in 100 rounds of five PUBLISHes no batch raised the mark")
		}
		for range 5 {
			if _, err := dc.Write(publish); err != nil {
				t.Fatal(err)
			}
		}
		sent += 5
		if _, err := io.ReadFull(broker, make([]byte, 5*len(publish))); err != nil {
			t.Fatal(err)
		}
	}
	if m := mark(); m < 2*ackBytesMin || m > 5*ackBytesMin {
		t.Fatalf("after a batch of QoS 1 PUBLISHes the mark is %d, want 8..20", m)
	}
	for range sent {
		broker.Write([]byte{0x40, 0x02, 0x00, 0x07})
	}
	if _, err := io.ReadFull(dc, make([]byte, 4*sent)); err != nil {
		t.Fatal(err)
	}
	if m := mark(); m != 1 {
		t.Fatalf("after the reader read the PUBACKs the mark is %d, want 1", m)
	}
}

// A batch written while the set before it is not read yet leaves that
// set's mark and timer as they are: the set's acks wake the reader when
// they are all there, not when the next batch's are, and the set waits no
// longer than its own bound. (A higher mark would also drop a wakeup
// the poller had not collected yet: TestAckMarkNotRaisedOverUnreadBytes.)
func TestAckMarkOfAnUnreadSetStands(t *testing.T) {
	a, fd, broker := lowatPair(t)
	a.bound = time.Hour
	a.arm(2 * ackBytesMin)
	since := a.since
	a.arm(10 * ackBytesMin) // the next batch, before the first one's acks came
	if a.since != since || a.sets != 1 {
		t.Fatal("a batch armed over an unread set restarted its bound")
	}
	if _, err := broker.Write([]byte{0x40, 0x02, 0x00, 0x01, 0x40, 0x02, 0x00, 0x02}); err != nil {
		t.Fatal(err)
	}
	if !queued(t, fd, 8) {
		t.Fatal("the first set's two PUBACKs wait for the next batch's")
	}
}

// Bytes that came before the mark was raised (a PINGRESP, an inbound
// PUBLISH, the ack of a batch of one) whose wakeup the poller has not
// collected yet are not hidden by it either: the batch is not coalesced.
func TestAckMarkNotRaisedOverUnreadBytes(t *testing.T) {
	a, fd, broker := lowatPair(t)
	a.bound = time.Hour
	ep := epollET(t, fd)
	if _, err := broker.Write([]byte{0xd0, 0x00}); err != nil { // PINGRESP
		t.Fatal(err)
	}
	if !queued(t, fd, 2) {
		t.Fatal("a PINGRESP does not wake an idle reader")
	}
	a.arm(10 * ackBytesMin)
	if !epollIn(t, ep) {
		t.Fatal("a batch's mark hid the wakeup of a PINGRESP that came before it")
	}
	if a.armed || a.sets != 0 {
		t.Fatal("a batch armed over unread bytes")
	}
}

// epollET is an edge-triggered epoll of fd's input, as the Go runtime's
// poller has, of the test's own: what it collects, and when, is the
// test's.
func epollET(t *testing.T, fd int) (ep int) {
	t.Helper()
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(ep) })
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(fd)}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		t.Fatal(err)
	}
	return ep
}

// epollIn collects ep's events without waiting: whether input is signalled.
func epollIn(t *testing.T, ep int) bool {
	t.Helper()
	evs := make([]unix.EpollEvent, 1)
	n, err := unix.EpollWait(ep, evs, 0)
	if err != nil {
		t.Fatal(err)
	}
	return n == 1 && evs[0].Events&unix.EPOLLIN != 0
}

// The timer's function of a set that ended may run after the next set was
// armed (it was started before woke stopped the timer): it does not
// expire the new set, which has a timer of its own.
func TestAckMarkStaleTimerLeavesTheNextSet(t *testing.T) {
	a, fd, broker := lowatPair(t)
	a.bound = time.Hour
	a.arm(3 * ackBytesMin)
	a.expire() // the earlier set's timer, late
	if a.expiry != 0 || a.pause != 0 || !a.armed {
		t.Fatalf("a late timer expired the set armed after it: expiry %d, pause %d", a.expiry, a.pause)
	}
	broker.Write([]byte{0x40, 0x02, 0x00, 0x01})
	if queued(t, fd, 4) {
		t.Fatal("a late timer lowered the mark of the set armed after it")
	}
}

// Anything that arrives counts towards the mark: an inbound PUBLISH as
// long as the batch's acks wakes the reader before they came.
func TestAckMarkCountsOtherBytes(t *testing.T) {
	a, fd, broker := lowatPair(t)
	a.bound = time.Hour
	a.arm(10 * ackBytesMin)
	publish := appendPublish311(nil, spool.Message{Topic: "cloud/cmd", Payload: make([]byte, 27), QoS: 0}, 0)
	if len(publish) != 10*ackBytesMin {
		t.Fatalf("wrong test: the PUBLISH is %d bytes, not the mark's %d", len(publish), 10*ackBytesMin)
	}
	broker.Write(publish[:len(publish)-1])
	if queued(t, fd, len(publish)-1) {
		t.Fatal("a PUBLISH a byte short of the mark woke the reader")
	}
	broker.Write(publish[len(publish)-1:])
	if !queued(t, fd, len(publish)) {
		t.Fatal("an inbound PUBLISH as long as the batch's acks does not wake the reader")
	}
}

// When the bound passes, a reader parked in the Go runtime's poller (edge
// triggered) is woken for the acks that are there: lowering the mark
// signals readiness again for bytes already queued (Linux
// tcp_set_rcvlowat -> tcp_data_ready). poll(2), which the other tests
// use, would not see a kernel that did not.
func TestAckMarkExpiryWakesAParkedReader(t *testing.T) {
	a, fd, broker := lowatPair(t)
	a.bound = time.Hour
	a.arm(3 * ackBytesMin)
	got := make(chan int, 1)
	go func() {
		n, _ := sockio.Read(a.raw, make([]byte, 64), true)
		got <- n
	}()
	waitParked(t, "TestAckMarkExpiryWakesAParkedReader")
	broker.Write([]byte{0x40, 0x02, 0x00, 0x01, 0x40, 0x02, 0x00, 0x02})
	if queued(t, fd, 8) {
		t.Fatal("two of three PUBACKs woke the reader")
	}
	a.mu.Lock()
	a.since = time.Now().Add(-a.bound) // the bound has passed
	a.mu.Unlock()
	a.expire()
	select {
	case n := <-got:
		if n != 8 {
			t.Fatalf("the woken reader read %d bytes, want 8", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the mark was lowered and the parked reader was not woken for the 8 bytes there")
	}
}

// waitParked waits until a goroutine of the test named test is parked in
// the runtime's network poller ("IO wait").
func waitParked(t *testing.T, test string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	buf := make([]byte, 1<<20)
	for {
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "[IO wait") && strings.Contains(g, test) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the reader did not park in the poller")
		}
		time.Sleep(time.Millisecond)
	}
}
