package main

import (
	"context"
	"time"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/internal/metrics"
)

// sysInterval is how often the bridges' $SYS topics are refreshed, the
// broker's own $SYS period.
const sysInterval = 10 * time.Second

// publishBridgeSys publishes every bridge's counters as retained local
// topics $SYS/bridge/<name>/<counter> (metrics.BridgeSys; the state topic
// is the bridge's own), at start and then every interval, each topic only
// when its value changed: an idle gateway publishes nothing, and a
// subscriber gets the current values at once from the retained store.
// $SYS topics are not persisted; they are regenerated at start. It returns
// nil when ctx is done (an errgroup member).
func publishBridgeSys(ctx context.Context, gw *gateway.Server, bridges []*bridge.Bridge, interval time.Duration) error {
	last := make(map[string]string)
	publish := func() {
		for _, b := range bridgeStatuses(bridges) {
			for _, v := range metrics.BridgeSys(b) {
				if old, ok := last[v.Topic]; ok && old == v.Value {
					continue
				}
				last[v.Topic] = v.Value
				// An empty payload clears the retained topic (no last error yet).
				gw.Publish(&gateway.Message{Topic: v.Topic, Payload: []byte(v.Value), Retain: true, Origin: "$SYS"})
			}
		}
	}
	publish()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			publish()
		}
	}
}
