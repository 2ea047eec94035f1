package config

import (
	"fmt"
	"os"
	"strings"
)

// Fleet variables: one config file for many gateways, each with its own
// identity upstream. ${HOSTNAME} and ${MACHINE_ID} are expanded in the
// fields that name a gateway to the outside: a bridge's name, client_id,
// and its topics' local_prefix and remote_prefix.
const (
	VarHostname  = "HOSTNAME"   // the kernel host name, as `hostname` prints it
	VarMachineID = "MACHINE_ID" // /etc/machine-id (systemd's 32 hex digits)
)

// machineIDFile is where systemd keeps the machine id (machine-id(5)).
const machineIDFile = "/etc/machine-id"

// Vars resolves the value of a fleet variable by name (without ${}).
type Vars func(name string) (string, error)

// HostVars resolves the fleet variables from this machine.
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
	return "", fmt.Errorf("unknown variable ${%s} (known: ${%s}, ${%s})", name, VarHostname, VarMachineID)
}

// expand replaces every ${NAME} in s by vars(NAME). A "$" not followed by
// "{" is literal.
func expand(s string, vars Vars) (string, error) {
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
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", fmt.Errorf("unterminated ${ in %q", s)
		}
		v, err := vars(s[i+2 : i+end])
		if err != nil {
			return "", err
		}
		b.WriteString(v)
		s = s[i+end+1:]
	}
}

// expandFleet expands the fleet variables in cfg's bridges, reporting
// each failure under its key.
func expandFleet(cfg *Config, vars Vars, es *Errors) {
	for i := range cfg.Bridges {
		b := &cfg.Bridges[i]
		k := fmt.Sprintf("bridges[%d]", i)
		field := func(key string, p *string) {
			v, err := expand(*p, vars)
			if err != nil {
				es.add(key, "%v", err)
				return
			}
			*p = v
		}
		field(k+".name", &b.Name)
		field(k+".client_id", &b.ClientID)
		for j := range b.Topics {
			tk := fmt.Sprintf("%s.topics[%d]", k, j)
			field(tk+".local_prefix", &b.Topics[j].LocalPrefix)
			field(tk+".remote_prefix", &b.Topics[j].RemotePrefix)
		}
	}
}
