package framing

import (
	"os/exec"
	"strings"
	"testing"
)

// The framing package is a leaf: standard library only, so firmware tools
// and the gateway can use it without pulling anything in.
func TestStdlibOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Skipf("go list unavailable: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p != "github.com/edgegw/edgegw/devices/framing" {
			t.Errorf("framing imports non-stdlib package %s", p)
		}
	}
}
