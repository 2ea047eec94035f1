package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/internal/config"
)

// TestDefaultsAgree: internal/config writes the defaults operators read
// (check-config, docs/config.md); gateway and bridge fill in their own for
// fields left zero. Mapped through the same functions run uses, every field
// both sides give a default must agree, and a field the config leaves zero
// must not be given something else by the library (the config's 0 would not
// mean what it says). Fields the config does not map at all are listed.
func TestDefaultsAgree(t *testing.T) {
	def := config.Default()
	agree(t, "gateway.Options", gatewayOptions(def), gateway.DefaultOptions(), map[string]string{
		"ReceiveMaximum":    "follows max_inflight (no key of its own)",
		"TopicAliasMaximum": "no key",
		"SysInterval":       "no key",
		"ShutdownGrace":     "no key (a stop's wait for persistent clients' acks, gateway/drain.go)",
		"Version":           "set by run from the build, not configured",
	})
	agree(t, "bridge.Config", bridgeConfig(config.DefaultBridge(), def.Persistence), bridge.DefaultConfig(), nil)
}

// agree compares fromConfig (the config's defaults, mapped) with lib (the
// library's zero value with its defaults applied), field by field.
func agree(t *testing.T, what string, fromConfig, lib any, unmapped map[string]string) {
	t.Helper()
	c, l := reflect.ValueOf(fromConfig), reflect.ValueOf(lib)
	for i := range c.NumField() {
		f := c.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		cv, lv := c.Field(i), l.Field(i)
		switch {
		case cv.IsZero() && lv.IsZero():
		case cv.IsZero():
			if _, ok := unmapped[f.Name]; !ok {
				t.Errorf("%s.%s: the config's default is the zero value, the library's is %v", what, f.Name, lv.Interface())
			}
		case lv.IsZero():
			// The library has no default (zero is a value, e.g. false);
			// the config chooses.
		case !reflect.DeepEqual(cv.Interface(), lv.Interface()):
			t.Errorf("%s.%s: the config's default %v, the library's %v", what, f.Name, cv.Interface(), lv.Interface())
		}
	}
	for name := range unmapped {
		if _, ok := c.Type().FieldByName(name); !ok {
			t.Errorf("%s has no field %s any more: drop it from the list", what, name)
		}
	}
}

// TestSlowSubscriberAfterReachesTheBroker: limits.slow_subscriber_after
// from a config file is the broker's flow-control threshold (docs/config.md).
func TestSlowSubscriberAfterReachesTheBroker(t *testing.T) {
	path := writeConfig(t, "limits:\n  slow_subscriber_after: 3s\n")
	cfg, err := config.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := gatewayOptions(cfg).FlowStall; got != 3*time.Second {
		t.Fatalf("FlowStall %v, want 3s", got)
	}
	if _, err := config.Load(writeConfig(t, "limits:\n  slow_subscriber_after: 0s\n"), nil); err == nil || !strings.Contains(err.Error(), "limits.slow_subscriber_after") {
		t.Fatalf("0s accepted or the error does not name the key: %v", err)
	}
}

// TestCheckConfigWarnsSlowSubscriberAfterPastWriteTimeout: docs/config.md
// says at most write_timeout takes effect; check-config says so when the
// key asks for more, and accepts the config.
func TestCheckConfigWarnsSlowSubscriberAfterPastWriteTimeout(t *testing.T) {
	t.Setenv(config.EnvConfig, "")
	t.Setenv("JOURNAL_STREAM", "")
	path := writeConfig(t, "limits: {slow_subscriber_after: 20s, write_timeout: 10s}\n")
	code, _, errOut := call(t, "check-config", "--config", path)
	want := "warning: " + path + ": limits.slow_subscriber_after: 20s is longer than limits.write_timeout (10s): a subscriber is judged slow after 10s"
	if code != exitOK || !strings.Contains(errOut, want) {
		t.Fatalf("exit %d, stderr lacks\n%s\n%s", code, want, errOut)
	}
	path = writeConfig(t, "limits: {slow_subscriber_after: 5s, write_timeout: 10s}\n")
	if code, _, errOut := call(t, "check-config", "--config", path); code != exitOK || strings.Contains(errOut, "slow_subscriber_after") {
		t.Fatalf("5s under a 10s write_timeout: exit %d, stderr:\n%s", code, errOut)
	}
}
