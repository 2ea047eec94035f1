// Package listeners turns transports (TCP, TLS, WebSocket, serial) into
// connections for the gateway. A listener never imports the gateway: it
// hands each connection to an EstablishFunc, which the caller wires to
// gateway.Server.ServeConn.
package listeners

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"
)

// EstablishFunc serves one connection until it ends. certCN is the verified
// client certificate's common name when the listener maps it to a username.
type EstablishFunc func(ctx context.Context, conn net.Conn, listener, certCN string) error

// TCP is a plain TCP or TLS listener.
type TCP struct {
	Name    string
	Address string
	TLS     *tls.Config // nil = plain TCP
	// UseCNAsUsername passes the client certificate's CN to the gateway.
	UseCNAsUsername bool
	Log             *slog.Logger

	socket // the bound socket: Close, Addr
}

// Listen binds the address. It is separate from Serve so the caller can
// report readiness (systemd) only after every listener is bound.
func (l *TCP) Listen() error { return l.listen(l.Name, l.Address) }

// Serve accepts connections until ctx is cancelled, running establish for
// each on its own goroutine. It returns after every connection goroutine
// has finished.
func (l *TCP) Serve(ctx context.Context, establish EstablishFunc) error {
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
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { l.ln.Close() })
	defer stop()
	log.Info("listening", "address", l.ln.Addr().String(), "tls", l.TLS != nil)
	var backoff time.Duration
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Temporary failures (EMFILE): back off instead of spinning.
			backoff = min(max(backoff*2, 5*time.Millisecond), time.Second)
			log.Warn("accept failed", "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.serveConn(ctx, conn, establish, log)
		}()
	}
}

func (l *TCP) serveConn(ctx context.Context, conn net.Conn, establish EstablishFunc, log *slog.Logger) {
	cn := ""
	if l.TLS != nil {
		tc := tls.Server(conn, l.TLS)
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			log.Info("tls handshake failed", "remote", conn.RemoteAddr().String(), "err", err)
			conn.Close()
			return
		}
		if st := tc.ConnectionState(); l.UseCNAsUsername && len(st.PeerCertificates) > 0 {
			cn = st.PeerCertificates[0].Subject.CommonName
		}
		conn = tc
	}
	if err := establish(ctx, conn, l.Name, cn); err != nil {
		log.Debug("connection ended", "remote", conn.RemoteAddr().String(), "err", err)
	}
}
