package bridge

// The uplink's connect failure lines: rate-limited, and with a hint when
// retrying cannot heal the failure.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net/url"
	"time"
)

// connectFailed counts and logs a failed connection attempt to u: a
// failure that retrying cannot heal (a certificate the upstream or the
// bridge does not trust, refused credentials) at ERROR with a hint, others
// at INFO (the bridge already said WARN "uplink disconnected"); an
// identical failure again is not logged, only counted, with a summary
// every failLogEvery (issue 15: 14 lines in a 19 s outage).
func (b *Bridge) connectFailed(u *url.URL, err error) {
	b.connectFailures.Add(1)
	b.setState(Disconnected, u.Redacted(), err)
	b.failLog.failed(b.log, u.Redacted(), err, time.Now())
}

// failLogEvery is how often a failure that keeps repeating is summarised.
const failLogEvery = 5 * time.Minute

// failLog rate-limits the connect failure lines of one bridge. Only the
// owner goroutine uses it.
type failLog struct {
	key        string    // address and error text of the streak
	since      time.Time // its first failure
	lastLine   time.Time
	count      int // failures in the streak
	suppressed int // not logged since lastLine
}

func (f *failLog) failed(log *slog.Logger, addr string, err error, now time.Time) {
	hint := permanentHint(err)
	level := slog.LevelInfo
	if hint != "" {
		level = slog.LevelError
	}
	key := addr + "\x00" + err.Error()
	if key == f.key {
		f.count++
		if now.Sub(f.lastLine) < failLogEvery {
			f.suppressed++
			return
		}
		if level < slog.LevelWarn {
			level = slog.LevelWarn // a transient failure that lasts is worth a warning
		}
		log.Log(context.Background(), level, "uplink connect still failing", "address", addr, "err", err,
			"attempts", f.count, "since", f.since.Format(time.RFC3339), "not_logged", f.suppressed, hintAttr(hint))
		f.lastLine, f.suppressed = now, 0
		return
	}
	*f = failLog{key: key, since: now, lastLine: now, count: 1}
	log.Log(context.Background(), level, "uplink connect failed", "address", addr, "err", err, hintAttr(hint))
}

// connected ends a streak of failures, saying how long it lasted.
func (f *failLog) connected(log *slog.Logger, now time.Time) {
	if f.count > 1 {
		log.Info("uplink connect succeeded after failing", "attempts", f.count, "for", now.Sub(f.since).Round(time.Second))
	}
	*f = failLog{}
}

func hintAttr(hint string) slog.Attr {
	if hint == "" {
		return slog.Attr{}
	}
	return slog.String("hint", hint)
}

// permanentHint says what to fix when err will not heal by retrying: the
// upstream or the bridge distrusts a certificate, or the upstream refuses
// the credentials. "" for failures that may (network, DNS, a broker down).
func permanentHint(err error) string {
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		alert     tls.AlertError
		record    tls.RecordHeaderError
	)
	switch {
	case errors.Is(err, errBadCredentials):
		return "the upstream refuses the user name or password: fix username/password, then systemctl reload edgegw"
	case errors.Is(err, errNotAuthorized):
		return "the upstream does not authorise this client: check its credentials, client_id and the upstream's policy"
	case errors.Is(err, errIDRejected):
		return "the upstream rejects the client_id: choose another"
	case errors.As(err, &unknownCA):
		return "the upstream's certificate is not signed by a CA the bridge trusts: set tls.ca to the CA that issued it"
	case errors.As(err, &hostname):
		return "the upstream's certificate does not name the host in the address: fix the address or set tls.server_name"
	case errors.As(err, &invalid):
		return "the upstream's certificate is not valid (expired or not yet valid: check the clock, or the upstream's certificate)"
	case errors.As(err, &alert) && isCertAlert(alert):
		return "the upstream refuses the bridge's client certificate: set tls.cert and tls.key to a certificate its CA issued"
	case errors.As(err, &record):
		return "the upstream does not speak TLS on this port: use tcp:// or the upstream's TLS port"
	}
	return ""
}

// isCertAlert reports TLS alerts about the client's certificate (RFC 8446
// 6.2): bad_certificate 42, unsupported 43, revoked 44, expired 45,
// unknown 46, unknown_ca 48, access_denied 49, certificate_required 116.
func isCertAlert(a tls.AlertError) bool {
	switch a {
	case 42, 43, 44, 45, 46, 48, 49, 116:
		return true
	}
	return false
}
