package main

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
)

func TestFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"help", []string{"--help"}, "help requested"},
		{"bad framing", []string{"--device", "/x", "--framing", "slip"}, "unknown framing"},
		{"bad rate", []string{"--device", "/x", "--rate", "fast"}, "rate"},
		{"bad qos", []string{"--device", "/x", "--qos", "3"}, "--qos"},
		{"missing device", nil, "device: required"},
		{"device does not exist", []string{"--device", "/nonexistent/tty", "--count", "1"}, "no such file"},
		{"stray argument", []string{"--device", "/x", "extra"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(tt.args, &out, &errOut)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("run(%q) = %v, want error containing %q", tt.args, err, tt.wantErr)
			}
			if tt.name == "help" {
				if !errors.Is(err, flag.ErrHelp) || !strings.Contains(errOut.String(), "--device PATH") {
					t.Fatalf("help output:\n%s", errOut.String())
				}
			}
		})
	}
}
