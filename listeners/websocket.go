package listeners

// The WebSocket listener is an http.Server with one handler on Path. Each
// upgraded connection runs establish on the handler's goroutine (net/http
// started it; we count it in conns before it may run establish), so Serve
// can wait for every connection after the HTTP server has shut down: the
// server does not track hijacked connections itself.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Subprotocols accepted by the WebSocket listener, in order of preference:
// "mqtt" for MQTT 3.1.1 and 5.0 [MQTT-6.0.0-3], "mqttv3.1" for old MQTT 3.1
// clients.
var wsSubprotocols = []string{"mqtt", "mqttv3.1"}

const (
	defaultWSPath         = "/mqtt"
	defaultListenerWrite  = 10 * time.Second
	wsReadHeaderTimeout   = 10 * time.Second
	wsShutdownGracePeriod = time.Second // for responses not yet upgraded
	wsLinger              = time.Second // wait for the peer's close frame
)

// WebSocket is an MQTT-over-WebSocket listener (ws:// or, with TLS, wss://).
// Clients must upgrade on Path and send MQTT in binary frames; packets may
// span frames and a frame may hold several packets.
type WebSocket struct {
	Name    string
	Address string
	Path    string      // URL path of the endpoint; "" = /mqtt
	TLS     *tls.Config // nil = plain ws://
	// UseCNAsUsername passes the verified client certificate's CN to the
	// gateway (mTLS).
	UseCNAsUsername bool
	// AllowedOrigins limits browser clients by their Origin header. Empty
	// allows the same origin only: a page served from the host:port the
	// request was sent to (its Host header), so that a web page from
	// elsewhere that a LAN user happens to visit cannot talk to the broker.
	// Otherwise an origin must match an entry exactly (case-insensitive);
	// "*" in an entry matches any run of characters, so "*" alone allows
	// every page and "https://*.example.com" a domain's subdomains.
	// Requests without an Origin header (non-browser clients) are always
	// allowed.
	AllowedOrigins []string
	// WriteTimeout bounds the listener's own writes: the HTTP upgrade
	// response and error responses (the closing frame waits at most 1s).
	// The gateway sets its own deadline on every MQTT write. 0 = 10s.
	WriteTimeout time.Duration
	Log          *slog.Logger

	socket // the bound socket: Close, Addr
}

// Listen binds the address. It is separate from Serve so the caller can
// report readiness (systemd) only after every listener is bound.
func (l *WebSocket) Listen() error { return l.listen(l.Name, l.Address) }

func (l *WebSocket) path() string {
	if l.Path == "" {
		return defaultWSPath
	}
	return l.Path
}

func (l *WebSocket) writeTimeout() time.Duration {
	if l.WriteTimeout <= 0 {
		return defaultListenerWrite
	}
	return l.WriteTimeout
}

// Serve serves HTTP on the bound address until ctx is cancelled, handing
// each upgraded connection to establish. It returns after every connection
// has finished.
func (l *WebSocket) Serve(ctx context.Context, establish EstablishFunc) error {
	if l.Addr() == nil {
		if err := l.Listen(); err != nil {
			return err
		}
	}
	log := l.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("listener", l.Name)

	// cctx ends the upgraded connections, also when Serve fails on its own.
	cctx, cancelConns := context.WithCancel(ctx)
	defer cancelConns()
	h := &wsHandler{l: l, ctx: cctx, establish: establish, log: log}
	h.up = websocket.Upgrader{
		HandshakeTimeout: l.writeTimeout(),
		Subprotocols:     wsSubprotocols,
		// Write buffers only while writing: idle connections stay small.
		WriteBufferPool: &sync.Pool{},
		// Checked (and logged) by the handler before upgrading.
		CheckOrigin: func(*http.Request) bool { return true },
		Error: func(w http.ResponseWriter, r *http.Request, status int, reason error) {
			log.Debug("websocket upgrade refused", "remote", r.RemoteAddr, "status", status, "err", reason)
			http.Error(w, "MQTT over WebSocket: "+reason.Error(), status)
		},
	}
	mux := http.NewServeMux()
	mux.Handle(l.path(), h)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not found: the MQTT over WebSocket endpoint is "+l.path(), http.StatusNotFound)
	})
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: wsReadHeaderTimeout,
		IdleTimeout:       wsReadHeaderTimeout,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelInfo), // TLS handshake failures
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}

	ln := l.ln
	if l.TLS != nil {
		cfg := l.TLS.Clone()
		cfg.NextProtos = []string{"http/1.1"} // WebSocket needs HTTP/1.1 (no h2)
		ln = tls.NewListener(ln, cfg)
	}
	log.Info("listening", "address", l.ln.Addr().String(), "path", l.path(), "tls", l.TLS != nil)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	var err error
	select {
	case <-ctx.Done():
	case err = <-served:
		// The listener failed on its own (not by Shutdown).
		err = fmt.Errorf("listener %s: serve: %w", l.Name, err)
	}
	// Shutdown closes the listener and waits for handlers that have not
	// hijacked yet; upgraded connections end through cctx (the gateway
	// closes them) and are waited for below.
	cancelConns()
	sctx, cancel := context.WithTimeout(context.Background(), wsShutdownGracePeriod)
	if serr := srv.Shutdown(sctx); serr != nil {
		srv.Close()
	}
	cancel()
	if err == nil {
		if serr := <-served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
			err = fmt.Errorf("listener %s: serve: %w", l.Name, serr)
		}
	}
	h.conns.closeAndWait()
	return err
}

// wsHandler upgrades requests on the endpoint path.
type wsHandler struct {
	l         *WebSocket
	ctx       context.Context
	establish EstablishFunc
	log       *slog.Logger
	up        websocket.Upgrader
	conns     tracker
}

func (h *wsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !websocket.IsWebSocketUpgrade(r) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, "This is an MQTT over WebSocket endpoint. Connect with an MQTT client "+
			"to ws://%s%s (wss:// when TLS is enabled) using the WebSocket subprotocol \"mqtt\".\n",
			r.Host, h.l.path())
		return
	}
	if origin := r.Header.Get("Origin"); origin != "" && !originAllowed(h.l.AllowedOrigins, origin, r.Host) {
		h.log.Info("websocket origin refused", "remote", r.RemoteAddr, "origin", origin)
		http.Error(w, "MQTT over WebSocket: origin "+origin+" is not allowed on this listener", http.StatusForbidden)
		return
	}
	offered := websocket.Subprotocols(r)
	if len(offered) == 0 {
		// [MQTT-6.0.0-3] says the client offers "mqtt"; accept clients
		// that do not negotiate at all, since the bytes are MQTT anyway.
		h.log.Debug("websocket client offered no subprotocol", "remote", r.RemoteAddr)
	} else if !slices.ContainsFunc(offered, func(p string) bool { return slices.Contains(wsSubprotocols, p) }) {
		h.log.Info("websocket subprotocol refused", "remote", r.RemoteAddr, "offered", strings.Join(offered, ","))
		http.Error(w, "MQTT over WebSocket: unsupported subprotocol "+strings.Join(offered, ", ")+
			"; offer \"mqtt\" (or \"mqttv3.1\")", http.StatusBadRequest)
		return
	}
	if !h.conns.add() {
		http.Error(w, "server is shutting down", http.StatusServiceUnavailable)
		return
	}
	defer h.conns.done()

	ws, err := h.up.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrader.Error answered the client and logged
	}
	cn := ""
	if h.l.UseCNAsUsername && r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		cn = r.TLS.PeerCertificates[0].Subject.CommonName
	}
	conn := newWSConn(ws, h.l.writeTimeout())
	defer conn.linger(h.ctx, wsLinger)
	if err := h.establish(h.ctx, conn, h.l.Name, cn); err != nil {
		h.log.Debug("connection ended", "remote", r.RemoteAddr, "err", err)
	}
}

// originAllowed matches origin against the allow list, or with an empty
// list against host, the request's Host header (see
// WebSocket.AllowedOrigins).
func originAllowed(allowed []string, origin, host string) bool {
	if len(allowed) == 0 {
		u, err := url.Parse(origin)
		return err == nil && u.Host != "" && strings.EqualFold(u.Host, host)
	}
	origin = strings.ToLower(origin)
	for _, a := range allowed {
		if globMatch(strings.ToLower(a), origin) {
			return true
		}
	}
	return false
}

// globMatch reports whether s matches pattern, where '*' matches any run
// of characters (including '/' and '.') and everything else is literal.
func globMatch(pattern, s string) bool {
	star, next := -1, 0 // last '*' in pattern, and where s resumes after it
	p, i := 0, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, next = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			next++
			p, i = star+1, next
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// tracker counts connection goroutines that net/http started for us, and
// refuses new ones once closing so Add never races Wait.
type tracker struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func (t *tracker) add() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Add(1)
	return true
}

func (t *tracker) done() { t.wg.Done() }

func (t *tracker) closeAndWait() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.wg.Wait()
}
