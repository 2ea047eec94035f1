package bridge

// Design note: batched writes to the uplink (issue 20). paho writes each
// packet with its own Write, from its outgoing goroutine (and PINGREQ from
// its keepalive goroutine): one syscall per PUBLISH, which at thousands of
// messages a second costs more than the rest of the bridge together. So
// the uplink's Write only appends the packet to a buffer and returns; a
// flusher goroutine writes whatever has gathered in one syscall. Under a
// trickle each packet still goes out at once (the flusher is idle, so it
// writes the one packet straight away); under load the packets that
// arrive while a write is in the kernel go out together in the next one.
//
// Every promise of the unbuffered connection holds:
//   - one packet per Write, rewritten (wireid.go) before it is buffered,
//     so packets are never split or merged before the rewriting sees them;
//   - the write deadline: the flusher writes in chunks of writeChunk, each
//     with write_timeout; one that times out closes the uplink, and every
//     Write after it fails;
//   - back-pressure: a Write waits while maxPending bytes are buffered (a
//     packet larger than that is buffered alone), so a stalled link stops
//     paho within write_timeout, as before;
//   - Close flushes what is buffered (a DISCONNECT, say) within
//     write_timeout before it closes the socket; abort closes at once.

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/edgegw/edgegw/internal/sockio"
)

// maxPending is the most bytes buffered for the flusher before Write
// waits.
const maxPending = 64 << 10

// errWriterClosed is returned by a Write after Close or abort.
var errWriterClosed = errors.New("uplink writer closed")

// errTornDown is why the uplink broke when the bridge aborted it.
var errTornDown = errors.New("uplink torn down by the bridge")

// batchWriter buffers the uplink's writes for its flusher goroutine.
type batchWriter struct {
	conn      net.Conn
	raw       syscall.RawConn // conn's, when a plain TCP socket (conn.go rawSocket)
	timeout   time.Duration
	onTimeout func(error)

	mu      sync.Mutex
	pending []byte
	spare   []byte        // the flusher's last buffer, reused
	room    chan struct{} // made by a waiting Write; closed (and nil) when the flusher takes pending
	closing bool
	err     error         // sticky: the first write error, or errWriterClosed
	broken  error         // the write error or abort that closed the connection (not a Close)
	kick    chan struct{} // capacity 1: there is something to write, or closing
	done    chan struct{} // closed when the flusher has ended
}

// newBatchWriter starts the flusher of conn; it ends at Close, abort or
// the first write error.
func newBatchWriter(conn net.Conn, raw syscall.RawConn, timeout time.Duration, onTimeout func(error)) *batchWriter {
	w := &batchWriter{
		conn: conn, raw: raw, timeout: timeout, onTimeout: onTimeout,
		kick: make(chan struct{}, 1), done: make(chan struct{}),
	}
	go w.flushLoop()
	return w
}

// Write buffers one packet for the flusher.
func (w *batchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	for w.err == nil && !w.closing && len(w.pending) > 0 && len(w.pending)+len(p) > maxPending {
		if w.room == nil { // made only when a Write waits, not for every flush
			w.room = make(chan struct{})
		}
		room := w.room
		w.mu.Unlock()
		select {
		case <-room:
		case <-w.done:
		}
		w.mu.Lock()
	}
	if w.err == nil && w.closing {
		w.err = errWriterClosed
	}
	if err := w.err; err != nil {
		w.mu.Unlock()
		return 0, err
	}
	w.pending = append(w.pending, p...)
	w.mu.Unlock()
	w.wake()
	return len(p), nil
}

func (w *batchWriter) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Close flushes what is buffered, waiting at most the write timeout (for
// each chunk making progress), then closes the connection.
func (w *batchWriter) Close() error {
	w.mu.Lock()
	w.closing = true
	w.mu.Unlock()
	w.wake()
	t := time.NewTimer(w.timeout)
	defer t.Stop()
	select {
	case <-w.done:
	case <-t.C: // give up on the rest; the flusher's write fails at once
	}
	err := w.conn.Close()
	<-w.done
	return err
}

// abort closes the connection at once, dropping what is buffered.
func (w *batchWriter) abort() {
	w.mu.Lock()
	w.closing = true
	if w.broken == nil {
		w.broken = errTornDown
	}
	w.mu.Unlock()
	w.conn.Close()
	w.wake()
}

// flushLoop is the flusher: it writes what Write buffered, in order.
func (w *batchWriter) flushLoop() {
	defer close(w.done)
	for {
		<-w.kick
		for {
			w.mu.Lock()
			buf, closing := w.pending, w.closing
			w.pending = w.spare[:0]
			w.freeRoomLocked()
			w.mu.Unlock()
			if len(buf) == 0 {
				w.spare = buf
				if closing {
					w.fail(errWriterClosed)
					return
				}
				break
			}
			if err := w.write(buf); err != nil {
				w.fail(err)
				return
			}
			if cap(buf) <= 4*maxPending { // not a large packet's buffer
				w.spare = buf
			}
		}
	}
}

// freeRoomLocked releases the Writes waiting for room, if any. Caller
// holds mu.
func (w *batchWriter) freeRoomLocked() {
	if w.room != nil {
		close(w.room)
		w.room = nil
	}
}

// breakConn records err as why the connection broke, then closes it (in
// that order: the reader must find the cause when its read fails).
func (w *batchWriter) breakConn(err error) error {
	w.mu.Lock()
	if w.broken == nil {
		w.broken = err
	}
	w.mu.Unlock()
	w.conn.Close()
	return err
}

// brokenErr returns the write error or abort that closed the connection,
// or nil. The reader reports it in place of the socket's "use of closed
// network connection", which paho takes for a deliberate close after a
// DISCONNECT and does not report: the bridge would never hear that its
// uplink is gone.
func (w *batchWriter) brokenErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.broken
}

// fail records err for every later Write and releases waiting ones.
func (w *batchWriter) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.pending = nil
	w.freeRoomLocked()
	w.mu.Unlock()
}

// write writes p in chunks with a deadline each. A chunk that times out
// reports the timeout and closes the connection, so paho's reader fails
// and reports the connection lost; so does any other write error.
func (w *batchWriter) write(p []byte) error {
	for done := 0; done < len(p); {
		end := min(len(p), done+writeChunk)
		if err := w.conn.SetWriteDeadline(time.Now().Add(w.timeout)); err != nil {
			return w.breakConn(fmt.Errorf("set write deadline: %w", err))
		}
		var n int
		var err error
		if w.raw != nil {
			n, err = sockio.Write(w.raw, p[done:end])
		} else {
			n, err = w.conn.Write(p[done:end])
		}
		done += n
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				w.onTimeout(err)
			}
			return w.breakConn(err)
		}
	}
	return nil
}
