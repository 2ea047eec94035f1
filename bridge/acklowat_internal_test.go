package bridge

import (
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgegw/edgegw/bridge/spool"
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
	a.expire()
	if !queued(t, fd, 8) {
		t.Fatal("the expired mark still holds the two PUBACKs back")
	}
	if a.expiry != 1 || a.bound != lowatBoundMax || a.pause != lowatPause {
		t.Fatalf("after the timeout: expiry %d, bound %v, pause %d", a.expiry, a.bound, a.pause)
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
