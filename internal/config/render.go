package config

import (
	"fmt"
	"io"
	"reflect"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// Redacted is the value printed in place of a secret.
const Redacted = "<redacted>"

// Redacted returns a copy of c with secrets (bridge passwords) replaced by
// Redacted, for printing or logging.
func (c Config) Redacted() Config {
	c.Bridges = append([]Bridge(nil), c.Bridges...)
	for i := range c.Bridges {
		if c.Bridges[i].Password != "" {
			c.Bridges[i].Password = Redacted
		}
	}
	return c
}

// WriteYAML writes c, with secrets redacted, as YAML in the file's key
// names and order: sizes as "4MiB", durations as "10s". The output loads
// back to the same configuration (except the redacted secrets).
func (c Config) WriteYAML(w io.Writer) error {
	node := toNode(reflect.ValueOf(c.Redacted()))
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(node); err != nil {
		return fmt.Errorf("render config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("render config: %w", err)
	}
	return nil
}

func scalar(tag, v string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v}
}

// notApplicable lists, per listener type, the keys left out of the output
// because they mean nothing for that type (they are zero when valid).
var notApplicable = map[string]map[string]bool{
	ListenerTCP:       {"path": true, "allowed_origins": true, "device": true, "baud": true, "framing": true, "max_frame_size": true},
	ListenerWebSocket: {"device": true, "baud": true, "framing": true, "max_frame_size": true},
	ListenerSerial:    {"address": true, "tls": true, "path": true, "allowed_origins": true},
}

// toNode renders v by the config conventions (see the package doc).
func toNode(v reflect.Value) *yaml.Node {
	switch {
	case v.Type() == durationType:
		return scalar("!!str", FormatDuration(time.Duration(v.Int())))
	case v.Type() == windowType:
		if w := Window(v.Int()); w != WindowAuto {
			return scalar("!!int", w.String())
		}
		return scalar("!!str", WindowAuto.String())
	case v.Type() == sizeType:
		s := FormatSize(v.Int())
		if _, err := strconv.ParseInt(s, 10, 64); err == nil {
			return scalar("!!int", s)
		}
		return scalar("!!str", s)
	}
	switch v.Kind() {
	case reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode}
		var skip map[string]bool
		if l, ok := v.Interface().(Listener); ok {
			skip = notApplicable[l.Type]
		}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() || skip[tagName(f)] {
				continue
			}
			n.Content = append(n.Content, scalar("!!str", tagName(f)), toNode(v.Field(i)))
		}
		return n
	case reflect.Slice:
		n := &yaml.Node{Kind: yaml.SequenceNode}
		if v.Len() == 0 || v.Type().Elem().Kind() != reflect.Struct {
			n.Style = yaml.FlowStyle
		}
		for i := range v.Len() {
			n.Content = append(n.Content, toNode(v.Index(i)))
		}
		return n
	case reflect.String:
		return scalar("!!str", v.String())
	case reflect.Bool:
		return scalar("!!bool", strconv.FormatBool(v.Bool()))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return scalar("!!int", strconv.FormatInt(v.Int(), 10))
	}
	return scalar("!!str", fmt.Sprint(v.Interface()))
}
