package main

// Preflight: the checks of the files a config names, run by check-config
// and by run before anything is bound (the unit has no ExecStartPre: run's
// own check exits 2, which the unit does not retry), so that a config
// which passes check-config does not then fail at start. Validate
// in internal/config looks at values only; here every referenced file is
// opened and parsed the way the gateway will: password and ACL files by
// gateway/auth's own parser, certificate/key pairs by crypto/tls, CA
// bundles by crypto/x509. Each problem names its key.

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"time"

	"github.com/edgegw/edgegw/gateway/auth"
	"github.com/edgegw/edgegw/internal/config"
)

// certWarnBefore is how early a certificate's coming expiry is warned
// about: a month leaves time to renew by hand.
const certWarnBefore = 30 * 24 * time.Hour

// findings is what preflight found: errors stop the gateway (exit 2),
// warnings are printed (check-config) or logged at WARN (run).
type findings struct {
	errs     config.Errors
	warnings config.Errors
}

func (f *findings) fail(key, format string, a ...any) {
	f.errs = append(f.errs, &config.FieldError{Key: key, Msg: fmt.Sprintf(format, a...)})
}

func (f *findings) warn(key, format string, a ...any) {
	f.warnings = append(f.warnings, &config.FieldError{Key: key, Msg: fmt.Sprintf(format, a...)})
}

// preflight checks the files cfg names and its exposure to the network.
// source (the config file path) is put on every finding. Certificate
// validity is judged at now, and only ever warned about: a board without
// a real-time clock may start with its clock far off.
func preflight(cfg config.Config, source string, now time.Time) findings {
	var f findings
	f.checkAuth(cfg.Auth)
	for i, l := range cfg.Listeners {
		k := fmt.Sprintf("listeners[%d].tls", i)
		if l.TLS.Cert != "" {
			f.checkKeyPair(k, l.TLS.Cert, l.TLS.Key, now)
		}
		if l.TLS.ClientCA != "" {
			f.checkCA(k+".client_ca", l.TLS.ClientCA, now)
		}
	}
	for i, b := range cfg.Bridges {
		k := fmt.Sprintf("bridges[%d].tls", i)
		if b.TLS.CA != "" {
			f.checkCA(k+".ca", b.TLS.CA, now)
		}
		if b.TLS.Cert != "" {
			f.checkKeyPair(k, b.TLS.Cert, b.TLS.Key, now)
		}
	}
	for i, b := range cfg.Bridges {
		if b.Engine == "paho" {
			// A warning, not an error: the line asked for an engine that
			// keeps the same promises, and refusing it would take the
			// whole gateway down at the first start after an upgrade.
			f.warn(fmt.Sprintf("bridges[%d].engine", i), "paho was removed: the session engine is the bridge's only uplink "+
				"and runs instead; delete the line")
		}
	}
	for i, l := range cfg.Listeners {
		if cfg.AnonymousOnNetwork(l) {
			f.warn(fmt.Sprintf("listeners[%d]", i), "listener %q on %s accepts ANONYMOUS clients from the network "+
				"(auth.allow_anonymous is true): anyone who reaches it may publish and subscribe to everything; "+
				"set auth.allow_anonymous: false with auth.password_file, require tls.client_ca, or bind 127.0.0.1", l.Name, l.Address)
		}
	}
	if a := cfg.Auth; !a.AllowAnonymous && a.PasswordFile == "" {
		// Only a certificate's CN vouches for a client then (gateway
		// connect.go): every other listener refuses everyone.
		for i, l := range cfg.Listeners {
			if !l.TLS.UseCNAsUsername {
				f.warn(fmt.Sprintf("listeners[%d]", i), "listener %q on %s: no client can connect to it: auth.allow_anonymous is false "+
					"and there is no auth.password_file, so only a certificate's CN on a listener with tls.use_cn_as_username gets in", l.Name, listenerWhere(l))
			}
		}
	}
	if l := cfg.Limits; l.SlowSubscriberAfter > l.WriteTimeout && l.WriteTimeout > 0 {
		f.warn("limits.slow_subscriber_after", "%s is longer than limits.write_timeout (%s): a subscriber is judged slow after %s",
			l.SlowSubscriberAfter, l.WriteTimeout, l.WriteTimeout)
	}
	for _, e := range append(f.errs, f.warnings...) {
		e.Source = source
	}
	return f
}

// checkAuth parses the password and ACL files with the gateway's parser,
// each on its own so that each problem names its key.
func (f *findings) checkAuth(a config.Auth) {
	if a.PasswordFile != "" {
		if _, err := os.ReadFile(a.PasswordFile); err != nil {
			f.fail("auth.password_file", "%v", err)
		} else if users, err := auth.ReadPasswordFile(a.PasswordFile); err != nil {
			f.fail("auth.password_file", "%v", err)
		} else if len(users) == 0 && !a.AllowAnonymous {
			f.warn("auth.password_file", "%s has no users and auth.allow_anonymous is false: only clients with a certificate CN as user name can connect (add users with edgegw passwd)", a.PasswordFile)
		}
	}
	if a.ACLFile != "" {
		if _, err := os.ReadFile(a.ACLFile); err != nil {
			f.fail("auth.acl_file", "%v", err)
		} else if err := (&auth.Files{ACLFile: a.ACLFile}).Load(); err != nil {
			f.fail("auth.acl_file", "%v", err)
		}
	}
}

// checkKeyPair reads a certificate chain and its key (keys k.cert, k.key),
// checks that they belong together, and warns about the leaf's validity.
func (f *findings) checkKeyPair(k, certFile, keyFile string, now time.Time) {
	certPEM, cerr := os.ReadFile(certFile)
	if cerr != nil {
		f.fail(k+".cert", "%v", cerr)
	}
	keyPEM, kerr := os.ReadFile(keyFile)
	if kerr != nil {
		f.fail(k+".key", "%v", kerr)
	}
	if cerr != nil || kerr != nil {
		return
	}
	certs, err := parseCerts(certPEM)
	if err != nil {
		f.fail(k+".cert", "%s: %v", certFile, err)
		return
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		f.fail(k+".key", "%s with %s: %v", keyFile, certFile, err)
		return
	}
	f.checkValidity(k+".cert", certFile, certs[0], now)
}

// checkCA reads a CA bundle the way the listeners and the bridge do and
// warns about each certificate's validity.
func (f *findings) checkCA(k, file string, now time.Time) {
	data, err := os.ReadFile(file)
	if err != nil {
		f.fail(k, "%v", err)
		return
	}
	certs, err := parseCerts(data)
	if err != nil {
		f.fail(k, "%s: %v", file, err)
		return
	}
	for _, c := range certs {
		f.checkValidity(k, file, c, now)
	}
}

// parseCerts returns every CERTIFICATE block of a PEM file, failing on
// one that does not parse or when there is none.
func parseCerts(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(out)+1, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no PEM certificate found")
	}
	return out, nil
}

func (f *findings) checkValidity(k, file string, c *x509.Certificate, now time.Time) {
	subject := c.Subject.String()
	day := func(t time.Time) string { return t.UTC().Format("2006-01-02") }
	switch left := c.NotAfter.Sub(now); {
	case left <= 0:
		f.warn(k, "%s: certificate %q expired on %s (%d days ago); peers will refuse it", file, subject, day(c.NotAfter), int(-left.Hours()/24))
	case left < certWarnBefore:
		f.warn(k, "%s: certificate %q expires on %s (in %d days)", file, subject, day(c.NotAfter), int(left.Hours()/24))
	}
	if now.Before(c.NotBefore) {
		f.warn(k, "%s: certificate %q is not valid before %s (is the clock right?)", file, subject, day(c.NotBefore))
	}
}

// listenerWhere is what a listener is bound to: its address, or a serial
// listener's device.
func listenerWhere(l config.Listener) string {
	if l.Device != "" {
		return l.Device
	}
	return l.Address
}
