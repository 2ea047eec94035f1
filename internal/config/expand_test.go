package config

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func fakeVars(name string) (string, error) {
	switch name {
	case VarHostname:
		return "pi-north-7", nil
	case VarMachineID:
		return "0123456789abcdef0123456789abcdef", nil
	}
	return "", errors.New("unknown variable ${" + name + "}")
}

// TestFleetExpansion: one file serves a fleet; each gateway's bridge name,
// client id and topic prefixes carry its own identity.
func TestFleetExpansion(t *testing.T) {
	p := writeFile(t, `
bridges:
  - name: cloud-${HOSTNAME}
    client_id: gw-${MACHINE_ID}
    addresses: [tcp://127.0.0.1:1884]
    topics:
      - {pattern: "sensors/#", remote_prefix: "farms/${HOSTNAME}/", local_prefix: "local/$literal/"}
`)
	c, err := LoadVars(p, nil, fakeVars)
	if err != nil {
		t.Fatal(err)
	}
	b := c.Bridges[0]
	if b.Name != "cloud-pi-north-7" || b.ClientID != "gw-0123456789abcdef0123456789abcdef" ||
		b.Topics[0].RemotePrefix != "farms/pi-north-7/" || b.Topics[0].LocalPrefix != "local/$literal/" {
		t.Errorf("expanded: name %q client_id %q prefixes %q %q", b.Name, b.ClientID, b.Topics[0].LocalPrefix, b.Topics[0].RemotePrefix)
	}

	bad := writeFile(t, `
bridges:
  - name: cloud
    client_id: gw-${SERIAL}
    addresses: [tcp://127.0.0.1:1884]
    topics: [{pattern: "a/#", remote_prefix: "x/${HOSTNAME"}]
`)
	_, err = LoadVars(bad, nil, fakeVars)
	for _, want := range []string{"bridges[0].client_id: unknown variable ${SERIAL}", "bridges[0].topics[0].remote_prefix: unterminated ${"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

// TestHostVars: the variables come from this machine.
func TestHostVars(t *testing.T) {
	h, _ := os.Hostname()
	if got, err := HostVars(VarHostname); err != nil || got != h {
		t.Errorf("${HOSTNAME} = %q, %v; want %q", got, err, h)
	}
	id, err := HostVars(VarMachineID)
	if b, rerr := os.ReadFile(machineIDFile); rerr == nil && strings.TrimSpace(string(b)) != "" {
		if err != nil || id != strings.TrimSpace(string(b)) {
			t.Errorf("${MACHINE_ID} = %q, %v; want the content of %s", id, err, machineIDFile)
		}
	} else if err == nil || !strings.Contains(err.Error(), "${MACHINE_ID}") {
		t.Errorf("${MACHINE_ID} without %s: %q, %v", machineIDFile, id, err)
	}
	if _, err := HostVars("SERIAL"); err == nil || !strings.Contains(err.Error(), "known: ${HOSTNAME}, ${MACHINE_ID}") {
		t.Errorf("unknown variable: %v", err)
	}
}
