package gateway_test

import (
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
)

// TestSysVersion: $SYS/broker/version reports Options.Version (cmd/edgegw
// sets "edgegw <build version>", docs/metrics.md), and "edgegw" without one.
func TestSysVersion(t *testing.T) {
	for _, tc := range []struct{ opt, want string }{
		{"edgegw 1.2.3-test", "edgegw 1.2.3-test"},
		{"", "edgegw"},
	} {
		b := startBroker(t, gateway.Options{AllowAnonymous: true, SysInterval: 50 * time.Millisecond, Version: tc.opt})
		rc, _ := rawConnect(t, b.addr, packet.V311, "sysver", true, nil)
		rc.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "$SYS/broker/version"})
		p := rc.nextPublish(10 * time.Second)
		if p.Topic != "$SYS/broker/version" || string(p.Payload) != tc.want {
			t.Errorf("Version %q: got %s = %q, want %q", tc.opt, p.Topic, p.Payload, tc.want)
		}
		rc.disconnect()
		b.stop()
	}
}
