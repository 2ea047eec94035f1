package main

import (
	"net"
	"time"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/cmd/edgegw/internal/status"
	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/auth"
	"github.com/edgegw/edgegw/internal/config"
	"github.com/edgegw/edgegw/listeners"
)

// newStatusPage builds the status page served on the metrics address, and
// its history (to be run under the errgroup). When that address is not a
// loopback address and a password file is configured, the page asks for
// the user name and password of a user in it (HTTP basic auth).
func newStatusPage(cfg config.Config, gw *gateway.Server, bridges []*bridge.Bridge,
	serials []*listeners.Serial, files *auth.Files) *status.Handler {
	src := &status.Sources{Version: "edgegw " + versionLine(buildVersion(), buildCommit()), Started: time.Now(),
		MemoryBudget: gatewayOptions(cfg).MemoryBudget, Gateway: gw, Bridges: bridges, Serials: serials}
	if src.MemoryBudget <= 0 {
		src.MemoryBudget = 64 << 20 // the gateway's default (gateway.Options)
	}
	for _, l := range cfg.Listeners {
		addr := l.Address
		if l.Type == config.ListenerSerial {
			addr = l.Device
		}
		src.Listeners = append(src.Listeners, status.ListenerInfo{Name: l.Name, Type: l.Type, Address: addr, TLS: l.TLS.Enabled()})
	}
	h := &status.Handler{Sources: src, History: status.NewHistory(src)}
	if files != nil && cfg.Auth.PasswordFile != "" && !isLoopback(cfg.Metrics.Address) {
		h.Auth = func(user, password string) bool {
			return files.Authenticate("", user, []byte(password), true, "") == nil
		}
	}
	return h
}

// isLoopback reports whether a host:port binds to loopback only.
func isLoopback(address string) bool {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
