package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestYAMLErrorLine: a YAML syntax error names the file and the line the
// mistake is on. The parser itself names the line where the enclosing
// list or section began (line 1 for the listeners case), which is the
// wrong place to look.
func TestYAMLErrorLine(t *testing.T) {
	tests := []struct {
		name, body string
		line       int
		msg        string // the problem, after "invalid YAML: "
	}{
		{"key indented short in a list", "listeners:\n  - type: tcp\n    address: \":1883\"\n   name: x\n",
			4, "did not find expected '-' indicator (check the indentation"},
		{"list entry without its space", "listeners:\n  - type: tcp\n    address: 127.0.0.1:1883\n  -type: websocket\n    address: x\n",
			4, "did not find expected '-' indicator"},
		{"key indented deeper", "log:\n  level: info\n   format: json\n",
			3, "mapping values are not allowed in this context"},
		{"tab", "log:\n  level: info\n\tformat: text\n",
			3, "found a tab character that violates indentation (indent with spaces, not tabs)"},
		{"unclosed flow list", "log:\n  level: info\n  format: [text\nlimits:\n  max_inflight: 8\n",
			3, "did not find expected ',' or ']'"},
		{"unclosed quote", "listeners:\n  - type: tcp\n    address: \"127.0.0.1:1883\n  - type: websocket\n",
			3, "found unexpected end of stream (a quote that is never closed?)"},
		{"unknown anchor", "log:\n  level: info\n  format: *text\n",
			3, "unknown anchor 'text' referenced"},
		{"key given twice", "log:\n  level: info\n  level: debug\n",
			3, `mapping key "level" already defined at line 2`},
		{"dedented key", "log:\n  level: info\n  format: text\n level: x\n",
			4, "did not find expected key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, tt.body)
			_, err := Load(path, nil)
			var es Errors
			if !errors.As(err, &es) || len(es) != 1 {
				t.Fatalf("Load = %v, want one problem", err)
			}
			if es[0].Source != path || es[0].Line != tt.line {
				t.Errorf("placed at %s:%d, want %s:%d", es[0].Source, es[0].Line, path, tt.line)
			}
			if want := "invalid YAML: " + tt.msg; !strings.HasPrefix(es[0].Msg, want) {
				t.Errorf("message %q, want it to start %q", es[0].Msg, want)
			}
			prefix := fmt.Sprintf("%s:%d: invalid YAML: ", path, tt.line)
			if !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("rendered %q, want it to start %q", err.Error(), prefix)
			}
		})
	}
}

// TestYAMLErrorLineUnknown: when no prefix of the file fails the same way
// (the text given is not the file's), the line is left out, not guessed.
func TestYAMLErrorLineUnknown(t *testing.T) {
	if n := problemLine([]byte("log:\n  level: info\n"), "did not find expected key"); n != 0 {
		t.Fatalf("problemLine of a valid file = %d, want 0", n)
	}
	if n := problemLine(nil, "did not find expected key"); n != 0 {
		t.Fatalf("problemLine of nothing = %d, want 0", n)
	}
}
