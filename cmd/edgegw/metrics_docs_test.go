package main

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/internal/testutil"
)

var (
	// A name, not part of a dotted key (status.json's memory.go_total_bytes).
	docMetric = regexp.MustCompile(`(?:^|[^.\w])((?:edgegw|go|process)_[a-z0-9_]*[a-z0-9])`)
	docSys    = regexp.MustCompile(`\$SYS/[A-Za-z0-9_/<>+#.-]*[A-Za-z0-9_>+#.]`)
)

// docNames returns the metric names and $SYS topics named in the markdown
// files, with the file each was first seen in.
func docNames(t *testing.T, files ...string) (metricNames, sysTopics map[string]string) {
	t.Helper()
	metricNames, sysTopics = make(map[string]string), make(map[string]string)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, sm := range docMetric.FindAllStringSubmatch(string(b), -1) {
			m := sm[1]
			if _, ok := metricNames[m]; !ok {
				metricNames[m] = f
			}
		}
		for _, m := range docSys.FindAllString(string(b), -1) {
			if _, ok := sysTopics[m]; !ok {
				sysTopics[m] = f
			}
		}
	}
	return metricNames, sysTopics
}

// sysPattern turns a documented $SYS topic into a regexp: <placeholder>
// and + are one level, # and a trailing "..." any levels; with subtree
// set, the topic may also name a subtree ("under $SYS/broker/").
func sysPattern(doc string, subtree bool) *regexp.Regexp {
	doc = strings.TrimSuffix(doc, "...")
	var re strings.Builder
	re.WriteString("^")
	for i, level := range strings.Split(doc, "/") {
		if i > 0 {
			re.WriteString("/")
		}
		switch {
		case level == "+" || (strings.HasPrefix(level, "<") && strings.HasSuffix(level, ">")):
			re.WriteString("[^/]+")
		case level == "#" || level == "":
			re.WriteString(".*")
		default:
			re.WriteString(regexp.QuoteMeta(level))
		}
	}
	if subtree {
		re.WriteString("(/.*)?")
	}
	re.WriteString("$")
	return regexp.MustCompile(re.String())
}

// TestMetricsDocumented holds docs/ to the binary (issue 15, point 4):
// every metric and $SYS topic named anywhere in docs/ exists in the real
// binary's /metrics or $SYS output, and every one the binary serves is
// listed in docs/metrics.md. The gateway runs with everything that adds
// series: persistence, a serial listener and a bridge to mosquitto whose
// first address is dead (so it has a last error).
func TestMetricsDocumented(t *testing.T) {
	tty, _ := ptyWire(t)
	up := startCloud(t, false)
	g := newHarness(t)
	g.Listener(listenerConf{Name: "uart", Type: "serial", Device: tty})
	g.Persist("", "")
	// The first address is dead: a last error. The rate limit and budget
	// add their series, far above what the test sends.
	g.Bridge("cloud", freePort(t), up.Addr).With("rate_limit", 100000000).With("budget", "1GiB per 30d").Out("sensors/#", 1)
	g.Start()
	g.WaitLog(`msg="uplink connected"`)

	code, _, body := g.Get("/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	served := make(map[string]bool)
	drops := 0
	for _, line := range strings.Split(string(body), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			served[f[2]] = true
		}
		if strings.HasPrefix(line, "edgegw_messages_dropped_total{") {
			drops++
		}
	}

	// $SYS: the bridges' topics are retained at once; the broker's come
	// with its first period (10 s) after a subscriber appears, the drop
	// reasons last.
	var mu sync.Mutex
	sys := make(map[string]bool)
	c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + g.Addr).SetClientID("sys-reader"))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(50)
	if tok := c.Subscribe("$SYS/#", 0, func(_ mqtt.Client, m mqtt.Message) {
		mu.Lock()
		sys[m.Topic()] = true
		mu.Unlock()
	}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	testutil.Eventually(t, 25*time.Second, "the broker's $SYS topics", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for topic := range sys {
			if strings.HasPrefix(topic, "$SYS/broker/messages/dropped/") {
				n++
			}
		}
		// The ledger's topics come after last_error (metrics.BridgeSys).
		return n == drops && sys["$SYS/bridge/cloud/last_error"] &&
			sys["$SYS/bridge/cloud/ledger"] && sys["$SYS/bridge/cloud/ledger/adds_up"]
	})
	mu.Lock()
	defer mu.Unlock()

	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("docs: %v", err)
	}
	docs = append(docs, "../../README.md")
	metricNames, sysTopics := docNames(t, docs...)
	for name, file := range metricNames {
		if !served[name] {
			t.Errorf("%s names metric %s, which the binary does not serve", file, name)
		}
	}
	for doc, file := range sysTopics {
		re := sysPattern(doc, true)
		found := false
		for topic := range sys {
			if re.MatchString(topic) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("%s names $SYS topic %s, which the binary does not publish", file, doc)
		}
	}

	listedMetrics, listedSys := docNames(t, "../../docs/metrics.md")
	for _, name := range slices.Sorted(maps.Keys(served)) {
		if _, ok := listedMetrics[name]; !ok {
			t.Errorf("the binary serves %s; docs/metrics.md does not list it", name)
		}
	}
	// docs/metrics.md names each bridge topic in the $SYS column of the
	// bridge table, relative to $SYS/bridge/<name>/.
	md, _ := os.ReadFile("../../docs/metrics.md")
	for _, line := range strings.Split(string(md), "\n") {
		cols := strings.Split(line, "|")
		if len(cols) > 4 && strings.HasPrefix(strings.TrimSpace(cols[1]), "`edgegw_bridge_") {
			if f := strings.Split(cols[3], "`"); len(f) > 2 {
				listedSys["$SYS/bridge/<name>/"+f[1]] = "docs/metrics.md"
			}
		}
	}
	var patterns []*regexp.Regexp
	for doc := range listedSys {
		if !strings.HasSuffix(doc, "...") && !strings.Contains(doc, "#") && !strings.Contains(doc, "<topic>") {
			patterns = append(patterns, sysPattern(doc, false))
		}
	}
	for _, topic := range slices.Sorted(maps.Keys(sys)) {
		if !slices.ContainsFunc(patterns, func(re *regexp.Regexp) bool { return re.MatchString(topic) }) {
			t.Errorf("the binary publishes %s; docs/metrics.md does not list it", topic)
		}
	}
	if t.Failed() {
		t.Logf("served metrics: %v\n$SYS: %v", slices.Sorted(maps.Keys(served)), slices.Sorted(maps.Keys(sys)))
	}
}
