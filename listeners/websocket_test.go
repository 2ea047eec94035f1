package listeners_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
	"github.com/edgegw/edgegw/listeners"
)

// rawWS is a gorilla websocket client speaking MQTT 3.1.1 bytes.
type rawWS struct {
	t   *testing.T
	ws  *websocket.Conn
	buf []byte // received bytes not yet decoded
}

func dialWS(t *testing.T, url string, protos []string, hdr http.Header) (*rawWS, *http.Response, error) {
	t.Helper()
	d := websocket.Dialer{Subprotocols: protos, HandshakeTimeout: 5 * time.Second}
	ws, resp, err := d.Dial(url, hdr)
	if err != nil {
		return nil, resp, err
	}
	t.Cleanup(func() { ws.Close() })
	return &rawWS{t: t, ws: ws}, resp, nil
}

func mustDialWS(t *testing.T, url string) *rawWS {
	t.Helper()
	c, _, err := dialWS(t, url, []string{"mqtt"}, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	return c
}

func encode(t *testing.T, pks ...packet.Packet) []byte {
	t.Helper()
	var b []byte
	for _, p := range pks {
		var err error
		if b, err = packet.Append(b, p, packet.V311); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func (c *rawWS) send(b []byte) {
	c.t.Helper()
	if err := c.ws.WriteMessage(websocket.BinaryMessage, b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// next returns the next packet from the server, whatever the framing.
func (c *rawWS) next() packet.Packet {
	c.t.Helper()
	for {
		p, n, err := packet.DecodeBytes(c.buf, packet.V311, 1<<20)
		if err == nil {
			c.buf = c.buf[n:]
			return p
		}
		if !errors.Is(err, packet.ErrIncomplete) {
			c.t.Fatalf("decode: %v", err)
		}
		c.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		typ, m, err := c.ws.ReadMessage()
		if err != nil {
			c.t.Fatalf("read: %v", err)
		}
		if typ != websocket.BinaryMessage {
			c.t.Fatalf("server sent message type %d", typ)
		}
		c.buf = append(c.buf, m...)
	}
}

func (c *rawWS) connect(id string) {
	c.t.Helper()
	c.send(encode(c.t, &packet.Connect{ProtocolName: "MQTT", Version: packet.V311, CleanStart: true, KeepAlive: 30, ClientID: id}))
	if ca, ok := c.next().(*packet.Connack); !ok || ca.ReasonCode != 0 {
		c.t.Fatalf("want CONNACK 0, got %+v", ca)
	}
}

// TestWebSocketRawFraming: MQTT packets are a byte stream across frames.
func TestWebSocketRawFraming(t *testing.T) {
	h := newHarness(t, gateway.Options{AllowAnonymous: true})
	addr := h.ws(nil)
	c, resp, err := dialWS(t, "ws://"+addr+"/mqtt", []string{"mqtt"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get("Sec-Websocket-Protocol"); got != "mqtt" {
		t.Errorf("subprotocol %q, want mqtt [MQTT-6.0.0-4]", got)
	}

	// CONNECT split across two frames, the cut inside the variable header.
	conn := encode(t, &packet.Connect{ProtocolName: "MQTT", Version: packet.V311, CleanStart: true, KeepAlive: 30, ClientID: "raw-split"})
	c.send(conn[:5])
	c.send(conn[5:])
	if ca, ok := c.next().(*packet.Connack); !ok || ca.ReasonCode != 0 {
		t.Fatalf("want CONNACK 0, got %+v", ca)
	}

	// SUBSCRIBE and PUBLISH in one frame: both handled, in order.
	c.send(encode(t,
		&packet.Subscribe{PacketID: 7, Subscriptions: []packet.Subscription{{Filter: "raw/#", QoS: 1}}},
		&packet.Publish{QoS: 1, PacketID: 8, Topic: "raw/one", Payload: []byte("hello")},
	))
	var sawSuback, sawPuback, sawPublish bool
	for !(sawSuback && sawPuback && sawPublish) {
		switch p := c.next().(type) {
		case *packet.Suback:
			if p.PacketID != 7 || len(p.ReasonCodes) != 1 || p.ReasonCodes[0] != 1 {
				t.Fatalf("suback %+v", p)
			}
			sawSuback = true
		case *packet.Puback:
			if p.PacketID != 8 {
				t.Fatalf("puback %+v", p)
			}
			sawPuback = true
		case *packet.Publish:
			if !sawSuback || p.Topic != "raw/one" || string(p.Payload) != "hello" {
				t.Fatalf("publish %+v (suback seen: %v)", p, sawSuback)
			}
			c.send(encode(t, &packet.Puback{PacketID: p.PacketID}))
			sawPublish = true
		default:
			t.Fatalf("unexpected %T", p)
		}
	}

	// A PINGREQ cut in two frames of one byte each.
	ping := encode(t, &packet.Pingreq{})
	c.send(ping[:1])
	c.send(ping[1:])
	if p, ok := c.next().(*packet.Pingresp); !ok {
		t.Fatalf("want PINGRESP, got %T", p)
	}
	c.send(encode(t, &packet.Disconnect{}))
}

// TestWebSocketPahoAcrossTransports: paho over ws:// and over tcp:// see
// each other's messages.
func TestWebSocketPahoAcrossTransports(t *testing.T) {
	h := newHarness(t, gateway.Options{AllowAnonymous: true})
	wsURL := "ws://" + h.ws(nil) + "/mqtt"
	tcpURL := "tcp://" + h.tcp(nil, false)
	wsc := mustPaho(t, wsURL, "paho-ws", nil)
	tcpc := mustPaho(t, tcpURL, "paho-tcp", nil)
	t.Run("ws_to_tcp", func(t *testing.T) { pubSub(t, tcpc, wsc, "across/ws2tcp", 20) })
	t.Run("tcp_to_ws", func(t *testing.T) { pubSub(t, wsc, tcpc, "across/tcp2ws", 20) })
	t.Run("large", func(t *testing.T) {
		// Larger than gorilla's 4 KiB buffers and than one read.
		var got collector
		waitTok(t, wsc.Subscribe("across/big", 1, got.handle), "subscribe")
		big := strings.Repeat("0123456789abcdef", 20000) // 320 KB
		waitTok(t, wsc.Publish("across/big", 1, false, big), "publish")
		testutil.Eventually(t, 10*time.Second, "big message", func() bool { return len(got.get()) == 1 })
		if got.get()[0] != "across/big="+big {
			t.Fatal("big message corrupted")
		}
	})
}

func TestWebSocketHTTPErrors(t *testing.T) {
	h := newHarness(t, gateway.Options{AllowAnonymous: true})
	addr := h.ws(func(l *listeners.WebSocket) { l.Path = "/custom" })
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/custom"); code != http.StatusBadRequest || !strings.Contains(body, "MQTT over WebSocket") || !strings.Contains(body, "/custom") {
		t.Errorf("plain GET on the endpoint: %d %q", code, body)
	}
	if code, body := get("/mqtt"); code != http.StatusNotFound || !strings.Contains(body, "/custom") {
		t.Errorf("GET elsewhere: %d %q", code, body)
	}

	t.Run("unsupported_subprotocol", func(t *testing.T) {
		_, resp, err := dialWS(t, "ws://"+addr+"/custom", []string{"chat"}, nil)
		if err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("err %v resp %v, want 400", err, resp)
		}
	})
	t.Run("mqttv3.1_subprotocol", func(t *testing.T) {
		c, resp, err := dialWS(t, "ws://"+addr+"/custom", []string{"mqttv3.1"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Header.Get("Sec-Websocket-Protocol"); got != "mqttv3.1" {
			t.Errorf("subprotocol %q", got)
		}
		c.connect("v31proto")
	})
	t.Run("no_subprotocol", func(t *testing.T) {
		c, _, err := dialWS(t, "ws://"+addr+"/custom", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.connect("noproto")
	})
	t.Run("text_frame", func(t *testing.T) {
		c, _, err := dialWS(t, "ws://"+addr+"/custom", []string{"mqtt"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.ws.WriteMessage(websocket.TextMessage, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		c.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _, err = c.ws.ReadMessage()
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.CloseUnsupportedData || !strings.Contains(ce.Text, "binary") {
			t.Fatalf("want close 1003 naming binary frames, got %v", err)
		}
	})
}

func TestWebSocketOrigin(t *testing.T) {
	h := newHarness(t, gateway.Options{AllowAnonymous: true})
	addr := h.ws(func(l *listeners.WebSocket) {
		l.AllowedOrigins = []string{"https://app.example.com", "https://*.trusted.example"}
	})
	for _, tc := range []struct {
		origin string
		ok     bool
	}{
		{"https://app.example.com", true},
		{"HTTPS://APP.EXAMPLE.COM", true},
		{"https://a.b.trusted.example", true},
		{"", true}, // not a browser
		{"https://evil.example", false},
		{"http://app.example.com", false},
		{"https://app.example.com.evil.example", false},
		{"https://trusted.example", false},
	} {
		t.Run(tc.origin, func(t *testing.T) { checkOrigin(t, addr, tc.origin, tc.ok) })
	}
	t.Run("wildcard_all", func(t *testing.T) {
		addr := h.ws(func(l *listeners.WebSocket) { l.AllowedOrigins = []string{"*"} })
		hdr := http.Header{"Origin": {"https://anything.example"}}
		if _, _, err := dialWS(t, "ws://"+addr+"/mqtt", []string{"mqtt"}, hdr); err != nil {
			t.Fatal(err)
		}
	})
}

// TestWebSocketOriginDefault: with no allowed_origins, a browser page from
// another origin is refused and a page served by the listener's own
// host:port is accepted (issue 13, point 8).
func TestWebSocketOriginDefault(t *testing.T) {
	h := newHarness(t, gateway.Options{AllowAnonymous: true})
	addr := h.ws(nil)
	for _, tc := range []struct {
		origin string
		ok     bool
	}{
		{"https://evil.example", false},
		{"http://192.168.1.20:8083", false},
		{"null", false},
		{"http://" + addr, true},
		{"", true}, // not a browser
	} {
		t.Run(tc.origin, func(t *testing.T) { checkOrigin(t, addr, tc.origin, tc.ok) })
	}
}

// TestWebSocketWriteTimeout: the broker's write deadline works through the
// adapter; a subscriber that stops reading is disconnected.
func TestWebSocketWriteTimeout(t *testing.T) {
	h := newHarness(t, gateway.Options{AllowAnonymous: true, WriteTimeout: 300 * time.Millisecond})
	addr := h.ws(nil)
	c := mustDialWS(t, "ws://"+addr+"/mqtt")
	c.connect("stuck")
	c.send(encode(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "flood", QoS: 0}}}))
	if _, ok := c.next().(*packet.Suback); !ok {
		t.Fatal("no suback")
	}
	// From here on the subscriber reads nothing.

	pub := mustPaho(t, "tcp://"+h.tcp(nil, false), "flooder", nil)
	payload := strings.Repeat("z", 64<<10)
	closes := func() int64 { return h.srv.Stats().Closes[gateway.CloseWriteTimeout.String()] }
	testutil.Eventually(t, 30*time.Second, "write_timeout close", func() bool {
		for range 8 {
			waitTok(t, pub.Publish("flood", 0, false, payload), "publish")
		}
		return closes() >= 1
	})

	testutil.Eventually(t, 5*time.Second, "only the publisher connected", func() bool { return h.srv.Stats().Connections == 1 })
	// The client sees the end of the stream once it drains what was sent.
	c.ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		if _, _, err := c.ws.NextReader(); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("connection still open after write_timeout: %v", err)
			}
			break
		}
	}
}

// TestWebSocketShutdown: Serve returns after cancel with clients connected
// (goleak in TestMain checks nothing is left behind).
func TestWebSocketShutdown(t *testing.T) {
	h := newHarness(t, gateway.Options{AllowAnonymous: true})
	addr := h.ws(nil)
	for i := range 3 {
		c := mustDialWS(t, "ws://"+addr+"/mqtt")
		c.connect("idle" + string(rune('a'+i)))
	}
	// A half-sent HTTP request and an upgraded client without CONNECT.
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.Write([]byte("GET /mqtt HTTP/1.1\r\nHost: x\r\n"))
	mustDialWS(t, "ws://"+addr+"/mqtt")
}

// checkOrigin opens a WebSocket to addr with the Origin header origin
// (none when empty): the upgrade must be refused with 403 unless ok, and
// an accepted one must carry an MQTT session.
func checkOrigin(t *testing.T, addr, origin string, ok bool) {
	t.Helper()
	hdr := http.Header{}
	if origin != "" {
		hdr.Set("Origin", origin)
	}
	c, resp, err := dialWS(t, "ws://"+addr+"/mqtt", []string{"mqtt"}, hdr)
	if !ok {
		if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("want 403, got err %v resp %v", err, resp)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	c.connect("origin")
}
