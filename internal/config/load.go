package config

import (
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
)

// EnvPrefix starts every environment override: EDGEGW_<SECTION>_<KEY>, e.g.
// EDGEGW_LIMITS_MAX_INFLIGHT=8 sets limits.max_inflight.
const EnvPrefix = "EDGEGW_"

// EnvConfig names the config file when no --config flag is given. It is
// not an override and Load ignores it.
const EnvConfig = "EDGEGW_CONFIG"

// EnvListen moves the built-in listener (the one used when the config
// lists none) to another host:port, without a config file: with the
// Debian mosquitto on 1883, EDGEGW_LISTEN=127.0.0.1:1884 edgegw. A config
// file that lists listeners makes it an error (their addresses take
// ${env:NAME} instead). edgegw --listen sets it.
const EnvListen = "EDGEGW_LISTEN"

// Load reads the YAML file at path ("" = no file: defaults only), applies
// the EDGEGW_<SECTION>_<KEY> overrides found in env (entries "NAME=value",
// as from os.Environ), decodes strictly and validates. On failure the
// error is an Errors listing every problem, each naming its source (file
// or variable) and key; the returned Config is then the best effort and
// must not be used to run.
//
// Only the scalar keys of the sections log, limits, sessions, auth,
// persistence and metrics can be overridden from the environment; the
// lists (listeners, bridges) only from the file. A variable naming a known
// section with an unknown key is an error (a typo); variables whose second
// word is not a section are ignored (they belong to someone else).
//
// Each entry of listeners, bridges and bridges[i].topics starts from its
// defaults (DefaultListener for its type, DefaultBridge,
// DefaultBridgeTopic). A bridge without client_id gets DefaultClientID; a
// listener without name gets "<type><index>". $EDGEGW_LISTEN moves the
// built-in listener (EnvListen).
//
// Every string value may hold placeholders (expand.go): ${HOSTNAME} and
// ${MACHINE_ID} from this machine (see HostVars), ${env:NAME} from env.
func Load(path string, env []string) (Config, error) {
	return LoadVars(path, env, HostVars)
}

// LoadVars is Load with the fleet variables resolved by vars.
func LoadVars(path string, env []string, vars Vars) (Config, error) {
	v := viper.New()
	if path != "" {
		v.SetConfigFile(path)
		v.SetConfigType("yaml")
		if err := v.ReadInConfig(); err != nil {
			return Default(), readError(path, err)
		}
	}
	var es Errors
	envKeys := applyEnv(v, env, &es)

	raw := v.AllSettings()
	expandRaw(raw, newResolver(vars, env), &es)
	checkKeys(raw, reflect.TypeFor[Config](), "", &es)

	cfg := Default()
	prefillLists(&cfg, raw)
	md := &mapstructure.Metadata{}
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		DecodeHook:       decodeHook,
		WeaklyTypedInput: true,
		Metadata:         md,
		Result:           &cfg,
	})
	if err != nil {
		return cfg, fmt.Errorf("config decoder: %w", err)
	}
	if err := dec.Decode(raw); err != nil {
		collectDecodeErrors(err, &es)
	}
	if name, addr, ok := listenOverride(env); ok {
		if _, listed := getCI(raw, "listeners"); listed {
			es = append(es, &FieldError{Source: "$" + name, Key: "listeners",
				Msg: "--listen and $" + EnvListen + " move the built-in listener only, and this config lists its listeners: put ${env:" + EnvListen + "} in a listener's address instead"})
		} else {
			cfg.Listeners[0].Address = addr
			envKeys["listeners[0].address"] = name
		}
	}
	applyDerivedDefaults(&cfg, vars)

	if verr := cfg.Validate(); verr != nil {
		var ves Errors
		if errors.As(verr, &ves) {
			es = append(es, ves...)
		} else {
			es = append(es, &FieldError{Msg: verr.Error()})
		}
	}
	// Attribute every problem to where its value came from.
	for _, e := range es {
		if e.Source != "" {
			continue
		}
		if name, ok := envKeys[strings.ToLower(e.Key)]; ok {
			e.Source = "$" + name
		} else {
			e.Source = path
		}
	}
	dedupe(&es)
	return cfg, es.err()
}

// readError makes viper's file errors short and clear: a YAML mistake
// names its line (yamlErrors).
func readError(path string, err error) Errors {
	if isParseError(err) {
		// viper has just read it; reading it again only to place the error.
		if data, rerr := os.ReadFile(path); rerr == nil {
			return yamlErrors(path, data, err)
		}
		return yamlErrors(path, nil, err)
	}
	return Errors{{Source: path, Msg: "cannot read config file: " + err.Error()}}
}

// envSections are the sections whose scalar keys env can override.
var envSections = map[string]bool{
	"log": true, "limits": true, "sessions": true, "auth": true, "persistence": true, "metrics": true,
}

// applyEnv sets the overrides from env on v and returns key -> variable name.
func applyEnv(v *viper.Viper, env []string, es *Errors) map[string]string {
	keys := map[string]string{}
	cfgType := reflect.TypeFor[Config]()
	for _, kv := range env {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, EnvPrefix) || name == EnvConfig {
			continue
		}
		rest := strings.ToLower(strings.TrimPrefix(name, EnvPrefix))
		section, key, _ := strings.Cut(rest, "_")
		switch {
		case section == "listeners" || section == "bridges":
			*es = append(*es, &FieldError{Source: "$" + name, Key: section,
				Msg: "lists cannot be set from the environment; use the config file"})
			continue
		case !envSections[section]:
			continue // not ours
		}
		sf, _ := fieldByKey(cfgType, section)
		f, ok := fieldByKey(sf.Type, key)
		if !ok || f.Type.Kind() == reflect.Struct || f.Type.Kind() == reflect.Slice {
			*es = append(*es, &FieldError{Source: "$" + name, Key: section,
				Msg: fmt.Sprintf("unknown key %q%s", key, suggest(key, sf.Type))})
			continue
		}
		full := section + "." + key
		v.Set(full, val)
		keys[full] = name
	}
	return keys
}

// tagName is the config key of a struct field.
func tagName(f reflect.StructField) string {
	if t, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ","); t != "" {
		return t
	}
	return strings.ToLower(f.Name)
}

// fieldByKey finds the field of struct type t for config key (any case).
func fieldByKey(t reflect.Type, key string) (reflect.StructField, bool) {
	if t.Kind() != reflect.Struct {
		return reflect.StructField{}, false
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.IsExported() && strings.EqualFold(tagName(f), key) {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// checkKeys reports keys in raw that t (a struct type) does not have, and
// lists given where single values are expected and the other way round,
// with their full key path.
func checkKeys(raw any, t reflect.Type, path string, es *Errors) {
	m, ok := asMap(raw)
	if !ok {
		return // type mismatches are reported by the decoder
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f, ok := fieldByKey(t, k)
		if !ok {
			if path == "" {
				es.add("", "unknown top-level key %q%s", k, suggest(k, t))
			} else {
				es.add(path, "unknown key %q%s", k, suggest(k, t))
			}
			continue
		}
		sub := joinKey(path, tagName(f))
		val := m[k]
		switch {
		case f.Type.Kind() == reflect.Struct:
			checkKeys(val, f.Type, sub, es)
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
			if val == nil {
				continue
			}
			list, ok := val.([]any)
			if !ok {
				es.add(sub, "must be a list (each entry starting with \"- \")")
				delete(m, k) // keep the decoder from guessing
				continue
			}
			for i, item := range list {
				checkKeys(item, f.Type.Elem(), fmt.Sprintf("%s[%d]", sub, i), es)
			}
		}
	}
}

func joinKey(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func asMap(v any) (map[string]any, bool) {
	switch m := v.(type) {
	case map[string]any:
		return m, true
	case map[any]any:
		out := make(map[string]any, len(m))
		for k, v := range m {
			out[fmt.Sprint(k)] = v
		}
		return out, true
	}
	return nil, false
}

// suggest returns ` (did you mean "x"?)` for the closest key of t, if close.
func suggest(key string, t reflect.Type) string {
	if t.Kind() != reflect.Struct {
		return ""
	}
	best, bestD := "", math.MaxInt
	for i := range t.NumField() {
		name := tagName(t.Field(i))
		if d := editDistance(strings.ToLower(key), name); d < bestD {
			best, bestD = name, d
		}
	}
	if best != "" && bestD <= max(1, len(best)/3) {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return ""
}

// editDistance is the optimal-string-alignment distance of a and b
// (Levenshtein plus adjacent transpositions: "qso" is 1 from "qos").
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// getCI returns m[key] matching key in any case.
func getCI(m map[string]any, key string) (any, bool) {
	for k, v := range m {
		if strings.EqualFold(k, key) {
			return v, true
		}
	}
	return nil, false
}

// prefillLists sizes cfg's lists to the file's and fills each entry with
// its defaults; the decoder then overwrites only the keys given (it decodes
// into existing slice elements when ZeroFields is off).
func prefillLists(cfg *Config, raw map[string]any) {
	if v, ok := getCI(raw, "listeners"); ok {
		if list, ok := v.([]any); ok {
			cfg.Listeners = make([]Listener, len(list))
			for i, item := range list {
				typ := ListenerTCP
				if m, ok := asMap(item); ok {
					if t, ok := getCI(m, "type"); ok && t != nil {
						typ = fmt.Sprint(t)
					}
				}
				cfg.Listeners[i] = DefaultListener(typ)
			}
		}
	}
	if v, ok := getCI(raw, "bridges"); ok {
		if list, ok := v.([]any); ok {
			cfg.Bridges = make([]Bridge, len(list))
			for i, item := range list {
				cfg.Bridges[i] = DefaultBridge()
				m, _ := asMap(item)
				if tv, ok := getCI(m, "topics"); ok {
					if tl, ok := tv.([]any); ok {
						cfg.Bridges[i].Topics = make([]BridgeTopic, len(tl))
						for j := range tl {
							cfg.Bridges[i].Topics[j] = DefaultBridgeTopic()
						}
					}
				}
			}
		}
	}
}

// listenOverride returns the last EDGEGW_LISTEN entry of env.
func listenOverride(env []string) (name, addr string, ok bool) {
	for _, kv := range env {
		if v, found := strings.CutPrefix(kv, EnvListen+"="); found {
			addr, ok = v, true
		}
	}
	return EnvListen, addr, ok
}

// applyDerivedDefaults fills defaults that depend on other values.
func applyDerivedDefaults(cfg *Config, vars Vars) {
	for i := range cfg.Listeners {
		if cfg.Listeners[i].Name == "" && cfg.Listeners[i].Type != "" {
			cfg.Listeners[i].Name = fmt.Sprintf("%s%d", cfg.Listeners[i].Type, i)
		}
	}
	for i := range cfg.Bridges {
		b := &cfg.Bridges[i]
		if b.ClientID != "" || b.Name == "" {
			continue
		}
		b.ClientID = DefaultClientID(vars, b.Name)
	}
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	sizeType     = reflect.TypeFor[int64]()
	windowType   = reflect.TypeFor[Window]()
)

// decodeHook converts YAML/env values to the config's Go types with
// operator-friendly errors: durations need units, sizes accept units, and
// numbers and booleans given as strings (env) are parsed.
func decodeHook(from, to reflect.Type, data any) (any, error) {
	switch {
	case to == durationType:
		switch d := data.(type) {
		case time.Duration:
			return d, nil
		case string:
			return parseDuration(d)
		case int, int64, uint64, float64:
			if n := reflect.ValueOf(d); n.IsZero() {
				return time.Duration(0), nil
			}
			return nil, fmt.Errorf("duration %v has no unit (write e.g. %vs or %vms)", d, d, d)
		}
	case to == windowType:
		return parseWindow(data)
	case to == sizeType:
		switch d := data.(type) {
		case string:
			return ParseSize(d)
		case float64:
			if d != math.Trunc(d) {
				return nil, fmt.Errorf("size %v is not a whole number of bytes", d)
			}
		}
	case to.Kind() == reflect.Int:
		switch d := data.(type) {
		case string:
			n, err := strconv.Atoi(strings.TrimSpace(d))
			if err != nil {
				return nil, fmt.Errorf("invalid number %q (want a whole number)", d)
			}
			return n, nil
		case float64:
			if d != math.Trunc(d) {
				return nil, fmt.Errorf("%v is not a whole number", d)
			}
		}
	case to.Kind() == reflect.Bool:
		if s, ok := data.(string); ok {
			b, err := strconv.ParseBool(strings.TrimSpace(s))
			if err != nil {
				return nil, fmt.Errorf("invalid value %q (want true or false)", s)
			}
			return b, nil
		}
	case to.Kind() == reflect.String:
		switch d := data.(type) {
		case bool:
			return strconv.FormatBool(d), nil
		case map[string]any, map[any]any, []any:
			return nil, fmt.Errorf("expected a single value, got %s", describe(from))
		}
	case to.Kind() == reflect.Struct:
		if data != nil && from.Kind() != reflect.Map {
			return nil, fmt.Errorf("expected a mapping of keys (key: value), got %s %v", describe(from), data)
		}
	}
	return data, nil
}

// describe names a YAML value's type for an operator.
func describe(t reflect.Type) string {
	if t == nil {
		return "nothing"
	}
	switch t.Kind() {
	case reflect.Map:
		return "a mapping"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int64, reflect.Uint64, reflect.Float64:
		return "a number"
	}
	return t.String()
}

// collectDecodeErrors flattens mapstructure's error tree into es, one
// problem per key.
func collectDecodeErrors(err error, es *Errors) {
	var de *mapstructure.DecodeError
	switch e := err.(type) {
	case *mapstructure.DecodeError:
		inner := e.Unwrap()
		if errors.As(inner, &de) {
			collectDecodeErrors(inner, es)
			return
		}
		es.add(e.Name(), "%s", decodeMessage(inner))
		return
	case interface{ Unwrap() []error }:
		for _, sub := range e.Unwrap() {
			collectDecodeErrors(sub, es)
		}
		return
	}
	if inner := errors.Unwrap(err); inner != nil {
		collectDecodeErrors(inner, es)
		return
	}
	es.add("", "%s", decodeMessage(err))
}

// decodeMessage rewrites mapstructure's type errors in operator terms.
func decodeMessage(err error) string {
	var ute *mapstructure.UnconvertibleTypeError
	if errors.As(err, &ute) {
		want := ute.Expected.Type()
		wantS := "a " + want.String()
		switch {
		case want.Kind() == reflect.Slice:
			wantS = "a list"
		case want.Kind() == reflect.Struct:
			wantS = "a mapping"
		case want.Kind() == reflect.String:
			wantS = "a string"
		case want.Kind() == reflect.Bool:
			wantS = "true or false"
		case want.Kind() == reflect.Int || want == sizeType:
			wantS = "a number"
		}
		return fmt.Sprintf("expected %s, got %s", wantS, describe(reflect.TypeOf(ute.Value)))
	}
	var pe *mapstructure.ParseError
	if errors.As(err, &pe) {
		return fmt.Sprintf("invalid value %v: %v", pe.Value, pe.Err)
	}
	return err.Error()
}

// dedupe drops repeated identical problems (the same key can be reached by
// both the key check and the decoder).
func dedupe(es *Errors) {
	seen := map[string]bool{}
	out := (*es)[:0]
	for _, e := range *es {
		s := e.Error()
		if seen[s] {
			continue
		}
		seen[s] = true
		out = append(out, e)
	}
	*es = out
}
