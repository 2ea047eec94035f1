package config

import (
	"bytes"
	"strings"
	"testing"
)

// TestBridgeMaxInflight: a bridge's max_inflight is auto by default, reads
// "auto" or a number, refuses 0 (not
// taken for auto by accident) and renders back as written.
func TestBridgeMaxInflight(t *testing.T) {
	const base = "bridges:\n  - name: cloud\n    addresses: tcp://127.0.0.1:1884\n    topics: [{pattern: \"#\"}]\n"
	for _, tc := range []struct {
		name, line string
		want       Window
		err        string
	}{
		{name: "default", want: WindowAuto},
		{name: "auto", line: "    max_inflight: auto\n", want: WindowAuto},
		{name: "number", line: "    max_inflight: 64\n", want: 64},
		{name: "quoted", line: "    max_inflight: \"20\"\n", want: 20},
		{name: "zero", line: "    max_inflight: 0\n", err: "bridges[0].max_inflight: 0: write auto to size the window by the link, or a number 1..65535"},
		{name: "word", line: "    max_inflight: lots\n", err: `bridges[0].max_inflight: invalid value "lots" (want auto or a whole number)`},
		{name: "too big", line: "    max_inflight: 70000\n", err: "bridges[0].max_inflight: must be auto or in 1..65535 (got 70000)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(writeFile(t, base+tc.line), nil)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Load: %v; want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Bridges[0].MaxInflight; got != tc.want {
				t.Fatalf("max_inflight = %v, want %v", got, tc.want)
			}
			var buf bytes.Buffer
			if err := c.WriteYAML(&buf); err != nil {
				t.Fatal(err)
			}
			if want := "max_inflight: " + tc.want.String() + "\n"; !strings.Contains(buf.String(), want) {
				t.Fatalf("rendered config lacks %q:\n%s", want, buf.String())
			}
			back, err := Load(writeFile(t, buf.String()), nil)
			if err != nil || back.Bridges[0].MaxInflight != tc.want {
				t.Fatalf("rendered config loads as %v, %v", back.Bridges[0].MaxInflight, err)
			}
		})
	}
}
