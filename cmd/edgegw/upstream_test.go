package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
)

// TestBinaryUpstreamCapabilities: what the cloud broker granted is on
// /status.json, the status page and /metrics. Into a mosquitto with
// max_qos 1 over MQTT 5: QoS 1 at most, its Receive Maximum, retain
// available; QoS 2 rules are sent at QoS 1 (qos_not_granted: downgrade,
// the default), all 200 messages arrive, the log and the page say so.
// Over 3.1.1 into the same mosquitto: the bridge flag, and upstream_max_qos
// 1 as configured.
func TestBinaryUpstreamCapabilities(t *testing.T) {
	cl := startCloud(t, false, "max_qos 1", "max_inflight_messages 9")
	g := newHarness(t)
	g.Bridge("v5", cl.Addr).Protocol("5").Topic(topicConf{Pattern: "sensors/#", QoS: 2, RemotePrefix: "v5/"})
	g.Bridge("v3", cl.Addr).With("upstream_max_qos", 1).Topic(topicConf{Pattern: "sensors/#", QoS: 2, RemotePrefix: "v3/"})
	g.Start()
	r := cl.Reader(t, "v5/#", "v3/#")

	type upstream struct {
		Protocol        string `json:"protocol"`
		BridgeFlag      bool   `json:"bridge_flag"`
		MaxQoS          int    `json:"max_qos"`
		RetainAvailable bool   `json:"retain_available"`
		ReceiveMaximum  int    `json:"receive_maximum"`
	}
	var st struct {
		Bridges []struct {
			Name          string    `json:"name"`
			State         string    `json:"state"`
			Upstream      *upstream `json:"upstream"`
			UpstreamText  string    `json:"upstream_text"`
			QoSNotGranted string    `json:"qos_not_granted"`
			QoSDowngraded int       `json:"qos_downgraded"`
		} `json:"bridges"`
	}
	testutil.Eventually(t, 10*time.Second, "both bridges connected", func() bool {
		if err := g.Status(&st); err != nil {
			return false
		}
		return len(st.Bridges) == 2 && st.Bridges[0].State == "connected" && st.Bridges[1].State == "connected"
	})
	for i := range 200 {
		g.Mosq("mosquitto_pub", "-q", "2", "-t", fmt.Sprintf("sensors/%d", i), "-m", "x")
	}
	testutil.Eventually(t, 20*time.Second, "400 messages upstream", func() bool { return r.Count("v5/") == 200 && r.Count("v3/") == 200 })
	if err := g.Status(&st); err != nil {
		t.Fatal(err)
	}
	for _, b := range st.Bridges {
		u := b.Upstream
		switch {
		case u == nil:
			t.Errorf("%s: no upstream on /status.json", b.Name)
		case b.Name == "v5" && (u.Protocol != "5" || u.MaxQoS != 1 || !u.RetainAvailable || u.ReceiveMaximum != 9):
			t.Errorf("v5: upstream %+v", *u)
		case b.Name == "v3" && (u.Protocol != "3.1.1" || !u.BridgeFlag || u.MaxQoS != 1):
			t.Errorf("v3: upstream %+v", *u)
		}
		if b.QoSDowngraded != 200 || !strings.HasPrefix(b.QoSNotGranted, "downgrade") {
			t.Errorf("%s: %d downgraded, policy %q", b.Name, b.QoSDowngraded, b.QoSNotGranted)
		}
	}
	if !strings.Contains(st.Bridges[0].UpstreamText, "max QoS 1") {
		t.Errorf("upstream_text %q", st.Bridges[0].UpstreamText)
	}
	_, _, page := g.Get("/")
	for _, want := range []string{"MQTT 5 · max QoS 1 · retain available · receive maximum 9", "MQTT 3.1.1 with the bridge flag · max QoS 1", "above the granted QoS: "} {
		if !strings.Contains(page, want) {
			t.Errorf("the status page lacks %q", want)
		}
	}
	m := g.MetricsMap()
	for series, want := range map[string]float64{
		`edgegw_bridge_upstream_max_qos{bridge="v5"}`:                                  1,
		`edgegw_bridge_upstream_receive_maximum{bridge="v5"}`:                          9,
		`edgegw_bridge_upstream_info{bridge="v3",bridge_flag="true",protocol="3.1.1"}`: 1,
		`edgegw_bridge_qos_downgraded_total{bridge="v3"}`:                              200,
	} {
		if m[series] != want {
			t.Errorf("%s = %v, want %v", series, m[series], want)
		}
	}
	if n := strings.Count(g.Logs(), "the upstream grants a lower QoS than a topic rule asks: sending at the granted QoS"); n != 2 {
		t.Errorf("%d WARN lines for the downgrade, want one per bridge:\n%s", n, g.Logs())
	}
}
