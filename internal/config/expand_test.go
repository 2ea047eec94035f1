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
		return "pi-north-7.lan", nil
	case VarMachineID:
		return "0123456789abcdef0123456789abcdef", nil
	}
	return "", errors.New("unknown variable ${" + name + "}")
}

// fleetEnv is the environment of the template tests.
var fleetEnv = []string{"GW_ID=gw7", "SITE=north", "PORT=1884", "EMPTY=", "INFLIGHT=8"}

// fleetBridgeYAML is a bridge entry with one extra line (indented as a key of
// the entry) and one extra topic line.
func fleetBridgeYAML(extra, topic string) string {
	return `
bridges:
  - name: cloud
    addresses: [tcp://127.0.0.1:1884]
` + extra + `
    topics:
      - pattern: "sensors/#"
` + topic + "\n"
}

// tlsBridge is fleetBridgeYAML with a tls:// address.
func tlsBridge(extra string) string {
	return strings.Replace(fleetBridgeYAML(extra, ""), "tcp://127.0.0.1:1884", "tls://127.0.0.1:8883", 1)
}

// TestTemplateFields: a placeholder is expanded in every string field, in
// every section, from the machine (${HOSTNAME}, ${MACHINE_ID}) and the
// environment (${env:NAME}); $${ is a literal ${.
func TestTemplateFields(t *testing.T) {
	cases := []struct {
		name, yaml string
		env        []string
		get        func(Config) any
		want       any
	}{
		{"listener address", "listeners: [{name: lan, address: \"127.0.0.1:${env:PORT}\"}]", nil,
			func(c Config) any { return c.Listeners[0].Address }, "127.0.0.1:1884"},
		{"listener name", "listeners: [{name: \"lan-${env:SITE}\", address: \"127.0.0.1:1883\"}]", nil,
			func(c Config) any { return c.Listeners[0].Name }, "lan-north"},
		{"websocket path", "listeners: [{type: websocket, path: \"/${env:SITE}/mqtt\"}]", nil,
			func(c Config) any { return c.Listeners[0].Path }, "/north/mqtt"},
		{"websocket allowed_origins", "listeners: [{type: websocket, allowed_origins: [\"https://${env:SITE}.example\"]}]", nil,
			func(c Config) any { return c.Listeners[0].AllowedOrigins[0] }, "https://north.example"},
		{"serial device", "listeners: [{type: serial, device: \"/dev/${env:SITE}\"}]", nil,
			func(c Config) any { return c.Listeners[0].Device }, "/dev/north"},
		{"listener tls cert", "listeners: [{name: lan, tls: {cert: \"/etc/${env:SITE}.crt\", key: \"/etc/k\"}}]", nil,
			func(c Config) any { return c.Listeners[0].TLS.Cert }, "/etc/north.crt"},
		{"log level", "log: {level: \"${env:LEVEL}\"}", []string{"LEVEL=debug"},
			func(c Config) any { return c.Log.Level }, "debug"},
		{"limits number", "limits: {max_inflight: \"${env:INFLIGHT}\"}", nil,
			func(c Config) any { return c.Limits.MaxInflight }, 8},
		{"auth password_file", "auth: {password_file: \"/etc/edgegw/${env:SITE}.passwd\"}", nil,
			func(c Config) any { return c.Auth.PasswordFile }, "/etc/edgegw/north.passwd"},
		{"auth acl_file", "auth: {acl_file: \"/etc/edgegw/${env:SITE}.acl\"}", nil,
			func(c Config) any { return c.Auth.ACLFile }, "/etc/edgegw/north.acl"},
		{"persistence dir", "persistence: {dir: \"/var/lib/edgegw/${env:GW_ID}\"}", nil,
			func(c Config) any { return c.Persistence.Dir }, "/var/lib/edgegw/gw7"},
		{"metrics address", "metrics: {address: \"127.0.0.1:1${env:PORT}\"}", nil,
			func(c Config) any { return c.Metrics.Address }, "127.0.0.1:11884"},
		{"bridge name", strings.Replace(fleetBridgeYAML("", ""), "name: cloud", "name: cloud-${HOSTNAME}", 1), nil,
			func(c Config) any { return c.Bridges[0].Name }, "cloud-pi-north-7.lan"},
		{"bridge addresses", strings.Replace(fleetBridgeYAML("", ""), "tcp://127.0.0.1:1884", "\"tcp://${env:SITE}.example:1883\"", 1), nil,
			func(c Config) any { return c.Bridges[0].Addresses[0] }, "tcp://north.example:1883"},
		{"bridge client_id", fleetBridgeYAML("    client_id: \"gw-${env:GW_ID}-${MACHINE_ID}\"", ""), nil,
			func(c Config) any { return c.Bridges[0].ClientID }, "gw-gw7-0123456789abcdef0123456789abcdef"},
		{"bridge username", fleetBridgeYAML("    username: \"${HOSTNAME}\"", ""), nil,
			func(c Config) any { return c.Bridges[0].Username }, "pi-north-7.lan"},
		{"bridge password", fleetBridgeYAML("    username: u\n    password: \"${env:PASS}\"", ""), []string{"PASS=s3cret"},
			func(c Config) any { return c.Bridges[0].Password }, "s3cret"},
		{"bridge tls server_name", tlsBridge("    tls: {server_name: \"${env:SITE}.example\"}"), nil,
			func(c Config) any { return c.Bridges[0].TLS.ServerName }, "north.example"},
		{"bridge tls cert", tlsBridge("    tls: {cert: \"/etc/${env:GW_ID}.crt\", key: /k}"), nil,
			func(c Config) any { return c.Bridges[0].TLS.Cert }, "/etc/gw7.crt"},
		{"bridge spool max_bytes", fleetBridgeYAML("    spool: {max_bytes: \"${env:INFLIGHT}MiB\"}", ""), nil,
			func(c Config) any { return c.Bridges[0].Spool.MaxBytes }, 8 * MiB},
		{"bridge keepalive", fleetBridgeYAML("    keepalive: \"${env:INFLIGHT}s\"", ""), nil,
			func(c Config) any { return c.Bridges[0].Keepalive.String() }, "8s"},
		{"topic pattern", strings.Replace(fleetBridgeYAML("", ""), "\"sensors/#\"", "\"${env:SITE}/#\"", 1), nil,
			func(c Config) any { return c.Bridges[0].Topics[0].Pattern }, "north/#"},
		{"topic local_prefix", fleetBridgeYAML("", "        local_prefix: \"local/${env:SITE}/\""), nil,
			func(c Config) any { return c.Bridges[0].Topics[0].LocalPrefix }, "local/north/"},
		{"topic remote_prefix", fleetBridgeYAML("", "        remote_prefix: \"farms/${HOSTNAME}/${env:GW_ID}/\""), nil,
			func(c Config) any { return c.Bridges[0].Topics[0].RemotePrefix }, "farms/pi-north-7.lan/gw7/"},
		{"escape", fleetBridgeYAML("", "        remote_prefix: \"lit/$${HOSTNAME}/$$x/$y/\""), nil,
			func(c Config) any { return c.Bridges[0].Topics[0].RemotePrefix }, "lit/${HOSTNAME}/$$x/$y/"},
		{"environment override", "", []string{"EDGEGW_PERSISTENCE_DIR=/var/lib/${env:GW_ID}"},
			func(c Config) any { return c.Persistence.Dir }, "/var/lib/gw7"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := ""
			if tc.yaml != "" {
				path = writeFile(t, tc.yaml)
			}
			c, err := LoadVars(path, append(append([]string{}, fleetEnv...), tc.env...), fakeVars)
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			if got := tc.get(c); got != tc.want {
				t.Errorf("got %v, want %v (err %v)", got, tc.want, err)
			}
		})
	}
}

// TestTemplateErrors: an unknown placeholder, an unset or empty variable,
// a "${" without "}" and an empty placeholder are errors naming the key.
func TestTemplateErrors(t *testing.T) {
	p := writeFile(t, fleetBridgeYAML(`    client_id: gw-${SERIAL}
    username: "${env:NOPE}"
    password: "${env:EMPTY}"`, `        remote_prefix: "x/${HOSTNAME"
        local_prefix: "y/${}/"`)+`
listeners: [{name: lan, address: "127.0.0.1:${env:1X}"}]
`)
	_, err := LoadVars(p, fleetEnv, fakeVars)
	got := strings.Join(problems(t, err), "\n")
	for _, want := range []string{
		"bridges[0].client_id: unknown variable ${SERIAL}",
		"bridges[0].username: ${env:NOPE}: environment variable NOPE is not set",
		"bridges[0].password: ${env:EMPTY}: environment variable EMPTY is empty",
		"bridges[0].topics[0].remote_prefix: unterminated ${",
		`bridges[0].topics[0].local_prefix: placeholder "${}" is not a variable`,
		`listeners[0].address: ${env:1X}: "1X" is not an environment variable name`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q:\n%s", want, got)
		}
	}
}

// TestDefaultClientID: without client_id a bridge's id carries the host
// name, 8 hex digits derived from the machine id and the bridge's name;
// two machines of one host name differ, two bridges of one machine too.
func TestDefaultClientID(t *testing.T) {
	p := writeFile(t, fleetBridgeYAML("", "")+`
  - name: backup
    addresses: [tcp://127.0.0.1:1885]
    topics: [{pattern: "a/#"}]
`)
	c, err := LoadVars(p, nil, fakeVars)
	if err != nil {
		t.Fatal(err)
	}
	id := appMachineID("0123456789abcdef0123456789abcdef")
	if got, want := c.Bridges[0].ClientID, "edgegw-pi-north-7-"+id+"-cloud"; got != want {
		t.Errorf("client_id = %q, want %q", got, want)
	}
	if got := c.Bridges[1].ClientID; got != "edgegw-pi-north-7-"+id+"-backup" {
		t.Errorf("second bridge's client_id = %q", got)
	}
	if len(id) != 8 || strings.Contains("0123456789abcdef0123456789abcdef", id) {
		t.Errorf("machine part %q: want 8 hex digits not taken from the id itself", id)
	}
	other := func(name string) (string, error) {
		if name == VarMachineID {
			return "fedcba9876543210fedcba9876543210", nil
		}
		return fakeVars(name)
	}
	if a, b := DefaultClientID(fakeVars, "cloud"), DefaultClientID(other, "cloud"); a == b {
		t.Errorf("two machines named alike share client id %q", a)
	}
	noID := func(name string) (string, error) {
		if name == VarMachineID {
			return "", errors.New("no machine id")
		}
		return fakeVars(name)
	}
	if got := DefaultClientID(noID, "cloud"); got != "edgegw-pi-north-7-cloud" {
		t.Errorf("without a machine id: %q", got)
	}
}

// TestListenOverride: $EDGEGW_LISTEN moves the built-in listener; with a
// config that lists listeners it is an error naming the variable.
func TestListenOverride(t *testing.T) {
	c, err := LoadVars("", []string{EnvListen + "=127.0.0.1:1884"}, fakeVars)
	if err != nil || len(c.Listeners) != 1 || c.Listeners[0].Address != "127.0.0.1:1884" || c.Listeners[0].Name != "default" {
		t.Fatalf("listeners %+v, err %v", c.Listeners, err)
	}
	_, err = LoadVars("", []string{EnvListen + "=127.0.0.1"}, fakeVars)
	if err == nil || !strings.Contains(err.Error(), "$EDGEGW_LISTEN: listeners[0].address") {
		t.Errorf("bad address: %v", err)
	}
	p := writeFile(t, "listeners: [{name: lan, address: \"127.0.0.1:1883\"}]\n")
	_, err = LoadVars(p, []string{EnvListen + "=127.0.0.1:1884"}, fakeVars)
	if err == nil || !strings.Contains(err.Error(), "$EDGEGW_LISTEN: listeners: --listen and $EDGEGW_LISTEN move the built-in listener only") {
		t.Errorf("with listeners in the file: %v", err)
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
	if _, err := HostVars("SERIAL"); err == nil || !strings.Contains(err.Error(), "known: ${HOSTNAME}, ${MACHINE_ID}, ${env:NAME}") {
		t.Errorf("unknown variable: %v", err)
	}
}
