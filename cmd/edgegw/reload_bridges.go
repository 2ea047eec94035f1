package main

import (
	"log/slog"
	"slices"
	"strings"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/internal/config"
)

// reloadBridges applies the bridges of a reloaded config to the running
// bridges, matched by name: topic rules in place, connection settings by a
// reconnect of that bridge only (bridge/reload.go). It returns the keys
// that need a restart (added or removed bridges, settings a running bridge
// cannot change) and whether every bridge config was valid; an invalid one
// keeps its running config.
func reloadBridges(log *slog.Logger, cfg config.Config, running []*bridge.Bridge) (restart []string, ok bool) {
	ok = true
	byName := make(map[string]*bridge.Bridge, len(running))
	for _, b := range running {
		byName[b.Name()] = b
	}
	seen := make(map[string]bool)
	for _, bc := range cfg.Bridges {
		seen[bc.Name] = true
		b := byName[bc.Name]
		if b == nil {
			restart = append(restart, "bridges."+bc.Name+" (added)")
			continue
		}
		r, err := b.Reload(bridgeConfig(bc, cfg.Persistence))
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				log.Error("reload: bridge config invalid; the bridge keeps its running config", "bridge", bc.Name, "problem", line)
			}
			ok = false
			continue
		}
		if r.Rules {
			log.Info("reload: bridge topic rules replaced; spool and flows in flight kept", "bridge", bc.Name,
				"subscriptions", cmpOr(r.Subscriptions, "unchanged"))
		}
		if len(r.Reconnect) > 0 {
			log.Info("reload: bridge reconnects with the new settings", "bridge", bc.Name, "changed", strings.Join(r.Reconnect, ", "))
		}
		for _, k := range r.Restart {
			restart = append(restart, "bridges."+bc.Name+"."+k)
		}
	}
	for _, b := range running {
		if !seen[b.Name()] {
			restart = append(restart, "bridges."+b.Name()+" (removed)")
		}
	}
	slices.Sort(restart)
	return restart, ok
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
