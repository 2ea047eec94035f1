package config

import (
	"bytes"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// docDefaultExceptions are the rows of docs/config.md whose default is not
// one value the schema's defaults hold, with why.
var docDefaultExceptions = map[string]string{
	"listeners.name":      "<type><index>: filled in per entry at load",
	"listeners.address":   "per type (tcp, websocket): checked below",
	"bridges.client_id":   "edgegw-<host>-<id>-<name>: derived at load (TestDefaultClientID)",
	"limits.memory_limit": "0 (= 2 x memory_budget + 32MiB): the derived value is checked below",
}

// renderedDefaults is check-config's view of every default: Default() with
// one listener of each type and one bridge with one topic rule, rendered
// as check-config renders it, keyed "section.key" as docs/config.md does
// ("listeners.baud", "bridges.topics.qos", "bridges.tls.ca").
func renderedDefaults(t *testing.T) map[string]string {
	t.Helper()
	c := Default()
	b := DefaultBridge()
	b.Topics = []BridgeTopic{DefaultBridgeTopic()}
	c.Bridges = []Bridge{b}
	c.Listeners = append(c.Listeners, DefaultListener(ListenerWebSocket), DefaultListener(ListenerSerial))
	var buf bytes.Buffer
	if err := c.WriteYAML(&buf); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				walk(strings.TrimPrefix(prefix+"."+k, "."), x)
			}
		case []any:
			if len(v) == 0 {
				out[prefix] = "[]"
			}
			for _, x := range v {
				if _, ok := x.(map[string]any); ok {
					walk(prefix, x) // list entries: their keys, under the list's
				} else {
					out[prefix] = fmt.Sprint(v)
				}
			}
		default:
			if _, seen := out[prefix]; !seen { // the first listener (tcp) wins
				out[prefix] = fmt.Sprint(v)
			}
		}
	}
	walk("", doc)
	return out
}

// sameValue reports whether the page's default and the rendered one are
// the same value: equal text, or the same duration (60s = 1m) or size.
func sameValue(doc, rendered string) bool {
	if doc == `""` {
		doc = ""
	}
	if doc == rendered {
		return true
	}
	if d1, err1 := time.ParseDuration(doc); err1 == nil {
		if d2, err2 := time.ParseDuration(rendered); err2 == nil {
			return d1 == d2
		}
	}
	if doc == "0" && (rendered == "0s" || rendered == "0B") {
		return true
	}
	if s1, err1 := ParseSize(doc); err1 == nil {
		if s2, err2 := ParseSize(rendered); err2 == nil {
			return s1 == s2
		}
	}
	return false
}

// TestConfigDocDefaults: every "default" cell of docs/config.md's key
// tables states the value check-config prints and the gateway uses
// (TestConfigDoc holds that the rows exist; this, that their defaults are
// true). configs/edgegw.yaml's values are held by
// TestReferenceConfigShowsDefaults.
func TestConfigDocDefaults(t *testing.T) {
	raw, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	rendered := renderedDefaults(t)
	checked := 0
	for _, r := range configDocRows(string(raw)) {
		if len(r.cells) < 5 {
			t.Fatalf("%s:%d: a key row without a default column: %q", configDoc, r.n, r.key)
		}
		key, n := r.key, r.n
		cell := strings.TrimSpace(r.cells[3])
		if _, ok := docDefaultExceptions[key]; ok {
			continue
		}
		if !strings.HasPrefix(cell, "`") {
			if !strings.HasPrefix(cell, "—") {
				t.Errorf("%s:%d: %s: default %q is neither a `value` nor — (required)", configDoc, n, key, cell)
			}
			continue
		}
		want := strings.SplitN(cell, "`", 3)[1]
		got, ok := rendered[key]
		if !ok {
			t.Errorf("%s:%d: %s: no rendered default (keys: %v)", configDoc, n, key, reflect.ValueOf(rendered).MapKeys())
			continue
		}
		checked++
		if !sameValue(want, got) {
			t.Errorf("%s:%d: %s: the page says the default is %q, check-config prints %q", configDoc, n, key, want, got)
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d defaults: the table scan is broken", checked)
	}

	// The exceptions, each as the page states it.
	page := string(raw)
	for _, typ := range []string{ListenerTCP, ListenerWebSocket} {
		want := fmt.Sprintf("%s `%s`", typ, DefaultListener(typ).Address)
		if !strings.Contains(page, want) {
			t.Errorf("%s: the listeners.address row lacks %q", configDoc, want)
		}
	}
	d := Default().Limits
	want := fmt.Sprintf("`0` (= 2 × `memory_budget` + 32MiB, i.e. %s)", FormatSize(d.DerivedMemoryLimit()))
	if !strings.Contains(page, want) {
		t.Errorf("%s: the limits.memory_limit row lacks %q", configDoc, want)
	}
	if d.MemoryLimit != 0 || d.DerivedMemoryLimit() != 2*d.MemoryBudget+32<<20 {
		t.Errorf("memory_limit %d derives %d, the page says 0 = 2 x %d + 32MiB", d.MemoryLimit, d.DerivedMemoryLimit(), d.MemoryBudget)
	}
}

// TestReferenceConfigShowsDefaults: configs/edgegw.yaml, "the complete,
// commented reference" (README.md) that the .deb installs, sets every key
// to its default, so what a reader sees there is what a key left out
// means; its two listeners are the default tcp and websocket listener
// under the names lan and web (the comments say "default 127.0.0.1:1883",
// "default 127.0.0.1:8083", "default /mqtt").
func TestReferenceConfigShowsDefaults(t *testing.T) {
	c, err := Load(referencePath, nil)
	if err != nil {
		t.Fatal(err)
	}
	def := Default()
	def.Listeners = []Listener{DefaultListener(ListenerTCP), DefaultListener(ListenerWebSocket)}
	def.Listeners[0].Name, def.Listeners[1].Name = "lan", "web"
	// As check-config prints them (a nil and an empty list read the same).
	render := func(c Config) string {
		var b bytes.Buffer
		if err := c.WriteYAML(&b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	if got, want := render(c), render(def); got != want {
		t.Errorf("%s is not the defaults:\n--- %s\n%s\n--- defaults\n%s", referencePath, referencePath, got, want)
	}
}
