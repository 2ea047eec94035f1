package config

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"sort"
	"strings"
)

// Templates: one config file for many gateways. Every string value of the
// config (from the file or an EDGEGW_* override), in every section, may
// hold placeholders, expanded before the values are decoded, so numbers,
// sizes and durations may come from a placeholder too:
//
//	${HOSTNAME}    the kernel host name, as `hostname` prints it
//	${MACHINE_ID}  /etc/machine-id (systemd's 32 hex digits)
//	${env:NAME}    the environment variable NAME (set and not empty)
//	$${            a literal "${"
//
// A "$" not followed by "{" is literal. An unknown placeholder, an unset
// or empty variable, and a "${" without its "}" are errors naming the key.
const (
	VarHostname  = "HOSTNAME"   // the kernel host name, as `hostname` prints it
	VarMachineID = "MACHINE_ID" // /etc/machine-id (systemd's 32 hex digits)
	// VarEnvPrefix starts a placeholder naming an environment variable:
	// ${env:NAME}.
	VarEnvPrefix = "env:"
)

// machineIDFile is where systemd keeps the machine id (machine-id(5)).
const machineIDFile = "/etc/machine-id"

// Vars resolves the value of a host variable (HOSTNAME, MACHINE_ID) by
// name, without ${}.
type Vars func(name string) (string, error)

// HostVars resolves the host variables from this machine.
func HostVars(name string) (string, error) {
	switch name {
	case VarHostname:
		h, err := os.Hostname()
		if err != nil || h == "" {
			return "", fmt.Errorf("${%s}: no host name: %v", name, err)
		}
		return h, nil
	case VarMachineID:
		b, err := os.ReadFile(machineIDFile)
		if err != nil {
			return "", fmt.Errorf("${%s}: %w", name, err)
		}
		id := strings.TrimSpace(string(b))
		if id == "" {
			return "", fmt.Errorf("${%s}: %s is empty", name, machineIDFile)
		}
		return id, nil
	}
	return "", unknownVar(name)
}

func unknownVar(name string) error {
	return fmt.Errorf("unknown variable ${%s} (known: ${%s}, ${%s}, ${%sNAME}; write $${ for a literal ${)",
		name, VarHostname, VarMachineID, VarEnvPrefix)
}

// resolver expands placeholders with the host variables and an
// environment (the one Load was given, not the process's: check-config
// reads an environment file into it).
type resolver struct {
	vars Vars
	env  map[string]string
}

func newResolver(vars Vars, env []string) resolver {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v // a later entry wins, as in exec
		}
	}
	return resolver{vars: vars, env: m}
}

// lookup resolves one placeholder's name (what is between ${ and }).
func (r resolver) lookup(name string) (string, error) {
	if env, ok := strings.CutPrefix(name, VarEnvPrefix); ok {
		if !validEnvName(env) {
			return "", fmt.Errorf("${%s}: %q is not an environment variable name (letters, digits and _, not starting with a digit)", name, env)
		}
		v, set := r.env[env]
		switch {
		case !set:
			return "", fmt.Errorf("${%s}: environment variable %s is not set", name, env)
		case v == "":
			return "", fmt.Errorf("${%s}: environment variable %s is empty", name, env)
		}
		return v, nil
	}
	if name == VarHostname || name == VarMachineID {
		return r.vars(name)
	}
	return "", unknownVar(name)
}

func validEnvName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, c := range s {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// expand replaces every placeholder in s ("$${" gives "${").
func (r resolver) expand(s string) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		if i > 0 && s[i-1] == '$' { // $${: the escape
			b.WriteString(s[:i-1])
			b.WriteString("${")
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", fmt.Errorf("unterminated ${ in %q (write $${ for a literal ${)", s[i:])
		}
		name := s[i+2 : i+end]
		if name == "" || strings.Contains(name, "${") {
			return "", fmt.Errorf("placeholder %q is not a variable (write $${ for a literal ${)", s[i:i+end+1])
		}
		v, err := r.lookup(name)
		if err != nil {
			return "", err
		}
		b.WriteString(v)
		s = s[i+end+1:]
	}
}

// expandRaw expands the placeholders in every string value of raw (viper's
// settings: nested maps and lists) in place, reporting each failure under
// its key. A value that fails is left as it is: the decoder then reports
// nothing more for it than its type would.
func expandRaw(raw map[string]any, r resolver, es *Errors) {
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys) // problems in a stable order
	for _, k := range keys {
		raw[k] = expandValue(raw[k], k, r, es)
	}
}

func expandValue(v any, key string, r resolver, es *Errors) any {
	switch x := v.(type) {
	case string:
		out, err := r.expand(x)
		if err != nil {
			es.add(key, "%v", err)
			return x
		}
		return out
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			x[k] = expandValue(x[k], joinKey(key, k), r, es)
		}
		return x
	case map[any]any:
		for k := range x {
			x[k] = expandValue(x[k], joinKey(key, fmt.Sprint(k)), r, es)
		}
		return x
	case []any:
		for i := range x {
			x[i] = expandValue(x[i], fmt.Sprintf("%s[%d]", key, i), r, es)
		}
		return x
	case []string:
		for i := range x {
			x[i], _ = expandValue(x[i], fmt.Sprintf("%s[%d]", key, i), r, es).(string)
		}
		return x
	}
	return v
}

// DefaultClientID is a bridge's client id when the config gives none:
// edgegw-<host>-<id>-<bridge>, with host the host name up to its first dot
// and id 8 hex digits derived from the machine id (an application-specific
// hash, as machine-id(5) asks: the id itself stays private). Unique per
// machine and bridge: hosts often share a name (raspberrypi), machines do
// not share /etc/machine-id. Without a machine id, edgegw-<host>-<bridge>.
// Gateways sharing one machine id (containers on one host) need their own
// client_id, e.g. from ${env:NAME}.
func DefaultClientID(vars Vars, bridge string) string {
	host := "unknown"
	if h, err := vars(VarHostname); err == nil && h != "" {
		host, _, _ = strings.Cut(h, ".")
	}
	if id, err := vars(VarMachineID); err == nil && id != "" {
		return "edgegw-" + host + "-" + appMachineID(id) + "-" + bridge
	}
	return "edgegw-" + host + "-" + bridge
}

// appMachineID is 8 hex digits of HMAC-SHA256(machine id, "edgegw").
func appMachineID(machineID string) string {
	m := hmac.New(sha256.New, []byte(machineID))
	m.Write([]byte("edgegw"))
	return hex.EncodeToString(m.Sum(nil))[:8]
}
