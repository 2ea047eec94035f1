package bridge

// Live reload (SIGHUP). What a running bridge can take without a restart:
//
//   - topic rules: replaced in place. The compiled rules are swapped
//     atomically (the sink and the inbound handler read them per message),
//     the gateway sinks of the out rules are added and removed, and the
//     upstream subscriptions of the in rules are added and removed on the
//     live connection; a connection being set up subscribes the new set.
//     The spool, the messages in it and the flows in flight are untouched:
//     a spooled message was mapped to its upstream topic when it was
//     accepted, so removing its rule does not drop it.
//   - connection settings (addresses, client_id, username, password,
//     clean_session, keepalive, connect_timeout, tls.* paths or the
//     contents of the files they name): the bridge reconnects, this bridge
//     only. The owner goroutine applies them between two connections, when
//     no connection's goroutine reads them.
//
// Everything else (the spool's settings, write_timeout, ack_timeout,
// max_inflight, max_inflight_qos2, reconnect_min/max, max_packet_size: the
// sender reads it for every message) is read by running goroutines or
// fixed by the open spool: Reload names those keys as needing a restart
// and keeps their running values.

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Reloaded says what a Reload changed.
type Reloaded struct {
	Rules     bool     // topic rules replaced in place
	Reconnect []string // keys whose change makes the bridge reconnect
	Restart   []string // keys that changed but need a restart; the running values stay
	// Subscriptions reports the upstream SUBSCRIBE/UNSUBSCRIBE of changed in
	// rules on the live connection: "" when none was needed, else what was
	// done or why it waits for the next connection.
	Subscriptions string
}

// reloadState is what Reload keeps between calls and shares with the owner
// goroutine.
type reloadState struct {
	mu   sync.Mutex // serialises Reload; guards want and init
	want Config     // the running config: start-up values, with what Reload applied
	init bool

	// pending holds connection settings for the owner goroutine to apply
	// before its next connection attempt (applyPending).
	pending atomic.Pointer[Config]
	// wake (capacity 1) cuts the owner's wait between connection attempts
	// short when pending was set: new settings are tried at once, not
	// after a backoff of up to reconnect_max the old ones grew.
	wake chan struct{}

	subMu sync.Mutex
	live  *uplink         // the connection that last subscribed (it may have ended since)
	have  map[string]byte // its upstream subscriptions
	stale map[string]bool // removed filters still subscribed in a persistent upstream session
}

// errReload ends a connection made with settings a Reload replaced.
var errReload = errors.New("reload: reconnecting with the new settings")

// Reload applies cfg to the running bridge (same Name): topic rules in
// place, connection settings by reconnecting. An invalid cfg changes
// nothing and is returned with every problem. Safe to call while Run runs.
func (b *Bridge) Reload(cfg Config) (Reloaded, error) {
	var r Reloaded
	cfg.setDefaults()
	if cfg.Name != b.cfg.Name {
		return r, fmt.Errorf("bridge %s: reload as %q: a renamed bridge is another bridge (restart)", b.cfg.Name, cfg.Name)
	}
	c, err := cfg.compile()
	if err != nil {
		return r, err
	}
	rl := &b.rl
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if !rl.init { // b.cfg is written by the owner only after a Reload (applyPending)
		rl.want, rl.init = b.cfg, true
	}
	old := rl.want

	// The owner never writes these fields: reading b.cfg here is safe.
	restart := []struct {
		key     string
		changed bool
	}{
		{"spool", cfg.SpoolDir != b.cfg.SpoolDir || cfg.SpoolMaxBytes != b.cfg.SpoolMaxBytes ||
			cfg.SpoolSync != b.cfg.SpoolSync || cfg.SpoolSyncInterval != b.cfg.SpoolSyncInterval},
		{"write_timeout", cfg.WriteTimeout != b.cfg.WriteTimeout},
		{"ack_timeout", cfg.AckTimeout != b.cfg.AckTimeout},
		{"max_inflight", cfg.MaxInflight != b.cfg.MaxInflight},
		{"max_inflight_qos2", cfg.MaxInflightQoS2 != b.cfg.MaxInflightQoS2},
		{"reconnect_min", cfg.ReconnectMin != b.cfg.ReconnectMin},
		{"reconnect_max", cfg.ReconnectMax != b.cfg.ReconnectMax},
		{"bridge_flag", cfg.BridgeFlag != b.cfg.BridgeFlag},
		{"upstream_max_qos", cfg.UpstreamMaxQoS != b.cfg.UpstreamMaxQoS},
		{"qos_not_granted", cfg.QoSNotGranted != b.cfg.QoSNotGranted},
		{"drain", cfg.Drain != b.cfg.Drain || cfg.BacklogShare != b.cfg.BacklogShare},
		{"rate_limit", cfg.RateLimit != b.cfg.RateLimit},
		{"budget", cfg.BudgetBytes != b.cfg.BudgetBytes || cfg.BudgetPeriod != b.cfg.BudgetPeriod},
		{"protocol", cfg.Protocol != b.cfg.Protocol},
		{"max_packet_size", cfg.MaxPacketSize != b.cfg.MaxPacketSize},
	}
	for _, k := range restart {
		if k.changed {
			r.Restart = append(r.Restart, k.key)
		}
	}
	cur := b.c.Load()
	reconnect := []struct {
		key     string
		changed bool
	}{
		{"addresses", !slices.Equal(cfg.Addresses, old.Addresses) || cfg.AddressOrder != old.AddressOrder},
		{"client_id", cfg.ClientID != old.ClientID},
		{"username", cfg.Username != old.Username},
		{"password", cfg.Password != old.Password},
		{"clean_session", cfg.CleanSession != old.CleanSession},
		{"keepalive", cfg.KeepAlive != old.KeepAlive},
		{"connect_timeout", cfg.ConnectTimeout != old.ConnectTimeout},
		{"tls", cfg.TLS != old.TLS || !sameTLS(cur.tls, c.tls)},
	}
	for _, k := range reconnect {
		if k.changed {
			r.Reconnect = append(r.Reconnect, k.key)
		}
	}
	r.Rules = !slices.Equal(cfg.Topics, old.Topics)

	next := *cur
	if r.Rules {
		next.out, next.in = c.out, c.in
	}
	if len(r.Reconnect) > 0 {
		next.addrs, next.tls = c.addrs, c.tls
	}
	b.c.Store(&next)
	if r.Rules {
		b.syncSinks()
		rl.want.Topics = cfg.Topics
		r.Subscriptions = b.syncSubs()
	}
	if len(r.Reconnect) > 0 {
		w := &rl.want
		w.Addresses, w.ClientID, w.Username, w.Password = cfg.Addresses, cfg.ClientID, cfg.Username, cfg.Password
		w.AddressOrder = cfg.AddressOrder
		w.CleanSession, w.KeepAlive, w.ConnectTimeout, w.TLS = cfg.CleanSession, cfg.KeepAlive, cfg.ConnectTimeout, cfg.TLS
		p := *w
		rl.pending.Store(&p)
		select {
		case rl.wake <- struct{}{}:
		default: // a wake-up is pending already
		}
		rl.subMu.Lock()
		if s := rl.live; s != nil {
			s.teardown(errReload)
		}
		rl.subMu.Unlock()
	}
	return r, nil
}

// sameTLS reports whether two client TLS configs present the same
// certificates and trust the same roots (a file rewritten in place with
// new contents is a change).
func sameTLS(a, b *tls.Config) bool {
	if a == nil || b == nil {
		return a == b
	}
	if len(a.Certificates) != len(b.Certificates) {
		return false
	}
	for i := range a.Certificates {
		if !slices.EqualFunc(a.Certificates[i].Certificate, b.Certificates[i].Certificate, bytes.Equal) {
			return false
		}
	}
	if (a.RootCAs == nil) != (b.RootCAs == nil) {
		return false
	}
	return a.RootCAs == nil || a.RootCAs.Equal(b.RootCAs)
}

// applyPending is called by the owner goroutine before each round of
// connection attempts: it installs the connection settings of the last
// Reload. No connection's goroutine runs then, so none reads them.
func (b *Bridge) applyPending() {
	p := b.rl.pending.Swap(nil)
	if p == nil {
		return
	}
	select {
	case <-b.rl.wake: // for the settings applied now
	default:
	}
	b.cfg.Addresses, b.cfg.ClientID, b.cfg.Username, b.cfg.Password = p.Addresses, p.ClientID, p.Username, p.Password
	b.cfg.CleanSession, b.cfg.KeepAlive, b.cfg.ConnectTimeout, b.cfg.TLS = p.CleanSession, p.KeepAlive, p.ConnectTimeout, p.TLS
	b.log.Info("reload: connecting with the new settings")
}

// syncSinks registers the out rules' local filters with the gateway and
// removes those no out rule has any more. Nothing is registered before
// Open or after Run ended (b.filters is nil then).
func (b *Bridge) syncSinks() {
	b.openMu.Lock()
	defer b.openMu.Unlock()
	if b.filters == nil {
		return
	}
	want := make(map[string]bool)
	for _, r := range b.c.Load().out {
		want[r.localFilter] = true
	}
	kept := b.filters[:0]
	for _, f := range b.filters {
		if want[f] {
			kept = append(kept, f)
			delete(want, f)
			continue
		}
		if !slices.Contains(kept, f) {
			b.gw.RemoveSink(b.cfg.Name, f)
		}
	}
	b.filters = kept
	for _, f := range slices.Sorted(maps.Keys(want)) {
		if err := b.gw.AddSink(b.cfg.Name, f, sink{b}); err != nil {
			b.log.Error("add sink", "topic", f, "err", err)
			continue
		}
		b.filters = append(b.filters, f)
	}
}

// removeSinks removes every sink the bridge registered.
func (b *Bridge) removeSinks() {
	b.openMu.Lock()
	defer b.openMu.Unlock()
	for _, f := range b.filters {
		b.gw.RemoveSink(b.cfg.Name, f)
	}
	b.filters = nil
}

// reloadSubWait bounds how long Reload waits for the upstream's SUBACK or
// UNSUBACK of changed in rules: it runs on the goroutine that handles
// SIGHUP (and pings the systemd watchdog), so it must not wait long. A
// slower answer still applies; only the log does not see it.
const reloadSubWait = 3 * time.Second

// syncSubs brings the live connection's upstream subscriptions to the in
// rules now in force. It returns what it did, for the log.
func (b *Bridge) syncSubs() string {
	rl := &b.rl
	rl.subMu.Lock()
	defer rl.subMu.Unlock()
	want := b.c.Load().subscriptions()
	add := make(map[string]byte)
	for f, q := range want {
		if hq, ok := rl.have[f]; !ok || hq != q {
			add[f] = q
		}
	}
	var del []string
	for f := range rl.have {
		if _, ok := want[f]; !ok {
			del = append(del, f)
		}
	}
	slices.Sort(del)
	if len(add) == 0 && len(del) == 0 {
		return ""
	}
	rl.have = want
	if s := rl.live; s != nil && s.link.Err() == nil {
		return b.syncSubsLive(s, add, del) // uplinkengine.go
	}
	b.markStale(del)
	return "not connected: subscribed at the next connection"
}

// markStale remembers filters a persistent upstream session may still
// hold, to unsubscribe at the next connection. Caller holds rl.mu (Reload:
// want, not b.cfg, which the owner may be writing) and subMu.
func (b *Bridge) markStale(filters []string) {
	if b.rl.want.CleanSession || len(filters) == 0 {
		return // a clean session forgets its subscriptions itself
	}
	if b.rl.stale == nil {
		b.rl.stale = make(map[string]bool)
	}
	for _, f := range filters {
		b.rl.stale[f] = true
	}
}
