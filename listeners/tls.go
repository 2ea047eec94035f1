package listeners

// Server certificates are served through a CertReloader so a renewed
// certificate (certbot, step-ca, a fleet's config push) is used for new
// connections without a restart. There is no watcher goroutine: main calls
// Reload on SIGHUP, and handshakes stat the files at most once per
// CheckInterval and reload when they changed. Established connections keep
// the certificate they were made with.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultCertCheckInterval is how often handshakes may look at the
// certificate files for changes.
const DefaultCertCheckInterval = 5 * time.Second

// TLSConfig builds a server TLS configuration for the TCP and WebSocket
// listeners: TLS 1.2 minimum, Go's default cipher suites, the certificate
// served through the returned CertReloader. A non-empty clientCAFile turns
// on mTLS: clients must present a certificate signed by one of its CAs.
// The client CA file is read once.
func TLSConfig(certFile, keyFile, clientCAFile string) (*tls.Config, *CertReloader, error) {
	r, err := NewCertReloader(certFile, keyFile)
	if err != nil {
		return nil, nil, err
	}
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: r.GetCertificate,
	}
	if clientCAFile != "" {
		pem, err := os.ReadFile(clientCAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("tls client_ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("tls client_ca %s: no PEM certificate found", clientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, r, nil
}

// CertReloader holds a certificate/key pair loaded from files and reloads
// it when asked (Reload) or when a handshake finds the files changed. A
// failed reload keeps the previous certificate.
type CertReloader struct {
	certFile, keyFile string

	// CheckInterval is the minimum time between two looks at the files
	// from handshakes; 0 = DefaultCertCheckInterval, negative = only
	// Reload reloads. Set it before the config is in use.
	CheckInterval time.Duration
	// Log receives reload results; nil = silent. Set it before use.
	Log *slog.Logger

	cert      atomic.Pointer[tls.Certificate]
	nextCheck atomic.Int64 // unix nanoseconds

	mu      sync.Mutex // serialises loading; handshakes only TryLock it
	loaded  fileStamp  // files as last loaded; guarded by mu
	failed  fileStamp  // files as last failed to load; guarded by mu
	statErr string     // last stat failure logged; guarded by mu
}

// NewCertReloader loads certFile and keyFile (PEM).
func NewCertReloader(certFile, keyFile string) (*CertReloader, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("tls: cert and key are both required")
	}
	r := &CertReloader{certFile: certFile, keyFile: keyFile}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// Reload reads the files again. On error the current certificate stays in
// use and the error names the file at fault.
func (r *CertReloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, err := r.stat()
	if err != nil {
		return err
	}
	if err := r.loadLocked(st); err != nil {
		r.failed = st
		return err
	}
	return nil
}

// GetCertificate is the tls.Config hook. It reloads the files first when
// they changed since the last look (at most once per CheckInterval).
func (r *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.maybeReload()
	return r.cert.Load(), nil
}

func (r *CertReloader) interval() time.Duration {
	if r.CheckInterval == 0 {
		return DefaultCertCheckInterval
	}
	return r.CheckInterval
}

func (r *CertReloader) log() *slog.Logger {
	if r.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Log
}

func (r *CertReloader) maybeReload() {
	iv := r.interval()
	if iv < 0 {
		return
	}
	now := time.Now().UnixNano()
	if now < r.nextCheck.Load() {
		return
	}
	if !r.mu.TryLock() {
		return // another handshake is looking; serve the current one
	}
	defer r.mu.Unlock()
	r.nextCheck.Store(now + int64(iv))
	st, err := r.stat()
	if err != nil {
		if err.Error() != r.statErr {
			r.statErr = err.Error()
			r.log().Warn("tls certificate check failed; keeping the current certificate", "err", err)
		}
		return
	}
	r.statErr = ""
	if st.same(r.loaded) || st.same(r.failed) {
		return
	}
	if err := r.loadLocked(st); err != nil {
		r.failed = st // retried when the files change again
		r.log().Error("tls certificate reload failed; keeping the current certificate", "err", err)
	}
}

// loadLocked reads and parses the pair. Caller holds r.mu.
func (r *CertReloader) loadLocked(st fileStamp) error {
	certPEM, err := os.ReadFile(r.certFile)
	if err != nil {
		return fmt.Errorf("tls cert: %w", err)
	}
	keyPEM, err := os.ReadFile(r.keyFile)
	if err != nil {
		return fmt.Errorf("tls key: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("tls cert %s / key %s: %w", r.certFile, r.keyFile, err)
	}
	r.cert.Store(&cert)
	r.loaded = st
	r.failed = fileStamp{}
	if leaf := cert.Leaf; leaf != nil {
		r.log().Info("tls certificate loaded", "file", r.certFile, "subject", leaf.Subject.String(),
			"serial", leaf.SerialNumber.String(), "not_after", leaf.NotAfter)
		if time.Now().After(leaf.NotAfter) {
			r.log().Warn("tls certificate has expired", "file", r.certFile, "not_after", leaf.NotAfter)
		}
	}
	return nil
}

// fileStamp identifies a version of the cert and key files.
type fileStamp struct {
	cert, key os.FileInfo
}

func (r *CertReloader) stat() (fileStamp, error) {
	c, err := os.Stat(r.certFile)
	if err != nil {
		return fileStamp{}, fmt.Errorf("tls cert: %w", err)
	}
	k, err := os.Stat(r.keyFile)
	if err != nil {
		return fileStamp{}, fmt.Errorf("tls key: %w", err)
	}
	return fileStamp{cert: c, key: k}, nil
}

// same reports whether both files are unchanged: same inode (a rename
// over the file changes it), size and modification time.
func (s fileStamp) same(o fileStamp) bool {
	eq := func(a, b os.FileInfo) bool {
		return a != nil && b != nil && os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
	}
	return eq(s.cert, o.cert) && eq(s.key, o.key)
}
