package main

import (
	"context"
	"time"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/cmd/edgegw/internal/metrics"
	"github.com/edgegw/edgegw/gateway"
)

// sysInterval is how often the bridges' $SYS topics are refreshed, the
// broker's own $SYS period.
const sysInterval = 10 * time.Second

// publishBridgeSys publishes every bridge's counters as retained local
// topics $SYS/bridge/<name>/<counter> (metrics.BridgeSys; the state topic
// is the bridge's own, published on every change) every interval while a
// client subscribes to a $SYS filter, as the broker does with $SYS/broker:
// each topic only when its value changed since it was last published. So
// nothing is published for nobody, and the broker's message and retained
// counters count clients' messages. $SYS topics are not persisted; they
// are regenerated at start. It returns nil when ctx is done (an errgroup
// member).
func publishBridgeSys(ctx context.Context, gw *gateway.Server, bridges []*bridge.Bridge, interval time.Duration) error {
	last := make(map[string]string)
	publish := func() {
		if !gw.SysSubscribed() {
			return
		}
		for _, b := range bridgeStatuses(bridges) {
			for _, v := range metrics.BridgeSys(b) {
				if old, ok := last[v.Topic]; ok && old == v.Value {
					continue
				}
				last[v.Topic] = v.Value
				// An empty payload clears the retained topic (no last error yet).
				gw.Publish(&gateway.Message{Topic: v.Topic, Payload: []byte(v.Value), Retain: true, Origin: gateway.OriginSys})
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
