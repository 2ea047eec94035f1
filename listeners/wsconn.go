package listeners

// wsConn adapts a gorilla websocket to net.Conn so the gateway can treat a
// WebSocket client like any other byte stream.
//
// Ownership: Read is called by one goroutine (the gateway's reader); Write
// may be called by the gateway's writer and, before that exists, by the
// reader (a refused CONNECT); wmu serialises them because gorilla allows
// only one writer at a time. Close and the deadline setters may be called
// from any goroutine at any time.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// ErrTextFrame is returned by a WebSocket connection's Read when the client
// sends a text frame: MQTT over WebSocket uses binary frames only
// (5.0 and 3.1.1 §6, [MQTT-6.0.0-1]).
var ErrTextFrame = errors.New("websocket: text frame received; MQTT over WebSocket requires binary frames")

// maxCloseFrameWait bounds the best-effort close frame: Close may run on a
// goroutine the gateway needs back (shutdown, takeover).
const maxCloseFrameWait = time.Second

type wsConn struct {
	ws           *websocket.Conn
	closeTimeout time.Duration // bound on the close frame and on linger

	// Only touched by the reading goroutine (and by linger, after it).
	r       io.Reader // current message, nil between messages
	readErr error     // sticky: gorilla panics on 1000 reads after a failure

	wmu       sync.Mutex // serialises Write (gorilla: one concurrent writer)
	dmu       sync.Mutex
	wdeadline time.Time // guarded by dmu

	// Close protocol: Close sets closed, then looks at reading/writing;
	// Read and Write set theirs, then look at closed. Either Close sees the
	// call in progress and closes the socket to unblock it, or the call
	// sees closed and returns net.ErrClosed without touching the socket.
	reading, writing, closed atomic.Bool
	closeOnce, socketOnce    sync.Once
	socketClosed             atomic.Bool
}

func newWSConn(ws *websocket.Conn, closeTimeout time.Duration) *wsConn {
	return &wsConn{ws: ws, closeTimeout: closeTimeout}
}

// Read returns payload bytes of binary messages as one stream: a read may
// end inside a message and continue into the next, so MQTT packets may span
// messages and a message may hold several packets.
func (c *wsConn) Read(b []byte) (int, error) {
	c.reading.Store(true)
	defer c.reading.Store(false)
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	if c.readErr != nil {
		return 0, c.readErr
	}
	if len(b) == 0 {
		return 0, nil
	}
	for {
		if c.r == nil {
			typ, r, err := c.ws.NextReader()
			if err != nil {
				c.readErr = wsReadError(err)
				return 0, c.readErr
			}
			if typ != websocket.BinaryMessage {
				// [MQTT-6.0.0-1] a text frame closes the connection.
				c.readErr = ErrTextFrame
				c.closeWith(websocket.CloseUnsupportedData, "mqtt requires binary frames", true)
				return 0, c.readErr
			}
			c.r = r
		}
		n, err := c.r.Read(b)
		if errors.Is(err, io.EOF) {
			c.r = nil // end of this message; the stream goes on
			err = nil
		}
		if err != nil {
			c.readErr = wsReadError(err)
			return n, c.readErr
		}
		if n > 0 {
			return n, nil
		}
	}
}

// wsReadError turns a normal close from the peer into io.EOF so the gateway
// counts it as peer_closed; other errors keep their type (timeouts stay
// net.Error with Timeout() true).
func wsReadError(err error) error {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		switch ce.Code {
		case websocket.CloseNormalClosure, websocket.CloseGoingAway, websocket.CloseNoStatusReceived:
			return io.EOF
		}
		return fmt.Errorf("websocket closed by peer: %w", err)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return io.EOF // TCP closed without a close frame
	}
	return err
}

// Write sends b as one binary message in a single frame, bounded by the
// write deadline.
func (c *wsConn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.writing.Store(true)
	defer c.writing.Store(false)
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	if len(b) == 0 {
		return 0, nil
	}
	c.dmu.Lock()
	d := c.wdeadline
	c.dmu.Unlock()
	// gorilla applies its stored deadline when the frame write starts;
	// SetWriteDeadline also moves the socket's deadline for a write already
	// in progress.
	c.ws.SetWriteDeadline(d)
	if err := c.ws.WriteMessage(websocket.BinaryMessage, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Close sends a close frame best-effort and ends the connection for its
// user: later calls return net.ErrClosed. A Read or Write in progress is
// unblocked by closing the socket at once; otherwise the socket stays open
// until linger has given the peer a moment to answer the close frame (a
// socket closed under a peer's close reply makes browsers and MQTT.js
// report an error on a clean disconnect). Safe to call more than once and
// from any goroutine; the error is always nil (closing is best-effort).
func (c *wsConn) Close() error {
	c.closeWith(websocket.CloseNormalClosure, "", false)
	return nil
}

func (c *wsConn) closeWith(code int, text string, fromRead bool) {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		// A writer stuck on a peer that does not read holds gorilla's write
		// lock; do not queue a close frame behind it.
		if !c.writing.Load() {
			msg := websocket.FormatCloseMessage(code, text)
			_ = c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(min(c.closeTimeout, maxCloseFrameWait)))
		}
		if c.writing.Load() || (!fromRead && c.reading.Load()) {
			c.closeSocket()
		}
	})
}

func (c *wsConn) closeSocket() {
	c.socketOnce.Do(func() {
		c.socketClosed.Store(true)
		c.ws.Close()
	})
}

// linger finishes the close handshake: it waits up to wait (and at most
// closeTimeout; not at all once ctx is done) for the peer's close frame or EOF, then closes the socket.
// The owner calls it once the gateway is done with the connection, so no
// Read runs concurrently.
func (c *wsConn) linger(ctx context.Context, wait time.Duration) {
	c.Close()
	defer c.closeSocket()
	if c.socketClosed.Load() || ctx.Err() != nil || (c.readErr != nil && c.readErr != ErrTextFrame) {
		return // nothing to wait for, or gorilla's read state is unusable
	}
	stop := context.AfterFunc(ctx, c.closeSocket)
	defer stop()
	c.ws.SetReadDeadline(time.Now().Add(min(wait, c.closeTimeout)))
	for {
		if _, _, err := c.ws.NextReader(); err != nil {
			return // the peer's close frame, EOF or the deadline
		}
	}
}

func (c *wsConn) LocalAddr() net.Addr  { return c.ws.LocalAddr() }
func (c *wsConn) RemoteAddr() net.Addr { return c.ws.RemoteAddr() }

func (c *wsConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

func (c *wsConn) SetReadDeadline(t time.Time) error { return c.ws.SetReadDeadline(t) }

func (c *wsConn) SetWriteDeadline(t time.Time) error {
	c.dmu.Lock()
	c.wdeadline = t
	c.dmu.Unlock()
	return c.ws.NetConn().SetWriteDeadline(t)
}
