package main

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/edgegw/edgegw/internal/config"
)

// DefaultEnvFile is the environment file the packaged unit reads
// (EnvironmentFile=/etc/default/edgegw): check-config and ledger read it
// too when it exists, so they load the configuration the service runs
// with.
const DefaultEnvFile = "/etc/default/edgegw"

// readEnvFile reads an environment file in the subset of systemd's
// EnvironmentFile= syntax an operator writes: one KEY=VALUE per line,
// blank lines and lines starting with # or ; ignored, an optional
// "export " before the key, the value's surrounding whitespace dropped,
// and a value in "double" (with \" and \\) or 'single' quotes taken
// without them. The entries come back as "KEY=VALUE", in file order.
func readEnvFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" || strings.ContainsAny(k, " \t\"'") {
			return nil, fmt.Errorf("%s:%d: want KEY=VALUE, got %q", path, n, line)
		}
		v = strings.TrimSpace(v)
		switch {
		case len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"':
			v = strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(v[1 : len(v)-1])
		case len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'':
			v = v[1 : len(v)-1]
		}
		out = append(out, k+"="+v)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// loadEnv is the environment a config is loaded with: the process's, then
// the environment file's entries (which win, as for the service), then
// --listen. file is "" for none.
type loadEnv struct {
	env      []string
	file     string   // the environment file read ("" none)
	fromFile []string // the names it set, sorted
	listen   string   // --listen ("" none)
}

// newLoadEnv builds the environment from the process's, the file (if any)
// and --listen.
func newLoadEnv(file, listen string) (loadEnv, error) {
	e := loadEnv{env: os.Environ(), file: file, listen: listen}
	if file != "" {
		kvs, err := readEnvFile(file)
		if err != nil {
			return e, fmt.Errorf("environment file: %w", err)
		}
		seen := map[string]bool{}
		for _, kv := range kvs {
			k, _, _ := strings.Cut(kv, "=")
			if !seen[k] {
				seen[k] = true
				e.fromFile = append(e.fromFile, k)
			}
		}
		sort.Strings(e.fromFile)
		e.env = append(e.env, kvs...)
	}
	if listen != "" {
		e.env = append(e.env, config.EnvListen+"="+listen)
	}
	return e, nil
}

// overrides returns the EDGEGW_* entries that change the configuration
// (EDGEGW_CONFIG aside), each with where it came from, sorted: what
// check-config says the environment changes.
func (e loadEnv) overrides() []string {
	inFile := map[string]bool{}
	for _, k := range e.fromFile {
		inFile[k] = true
	}
	last := map[string]bool{}
	for _, kv := range e.env {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, config.EnvPrefix) && k != config.EnvConfig {
			last[k] = true
		}
	}
	var out []string
	for k := range last {
		switch {
		case k == config.EnvListen && e.listen != "":
			out = append(out, k+" (--listen)")
		case inFile[k]:
			out = append(out, k+" (from "+e.file+")")
		default:
			out = append(out, k+" (from the environment)")
		}
	}
	sort.Strings(out)
	return out
}
