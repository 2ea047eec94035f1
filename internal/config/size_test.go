package config

import (
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"0", 0, false},
		{"1048576", 1 << 20, false},
		{"100B", 100, false},
		{"512KiB", 512 << 10, false},
		{"4MiB", 4 << 20, false},
		{"1GiB", 1 << 30, false},
		{"64k", 64 << 10, false},
		{"64K", 64 << 10, false},
		{"16m", 16 << 20, false},
		{"1g", 1 << 30, false},
		{"1kB", 1000, false},
		{"1KB", 1000, false},
		{"1MB", 1000000, false},
		{"2GB", 2000000000, false},
		{"4 MiB", 4 << 20, false},
		{" 4mib ", 4 << 20, false},
		{"1.5MiB", 3 << 19, false},
		{"0.5k", 512, false},
		{"-1", -1, false}, // parses; Validate rejects where it matters
		{"", 0, true},
		{"MiB", 0, true},
		{"4XB", 0, true},
		{"4 MiBs", 0, true},
		{"1.0001k", 0, true},
		{"99999999999GiB", 0, true},
		{"1e3", 0, true},
		{"four", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSize(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseSize(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if !tt.wantErr && got != tt.want {
				t.Fatalf("ParseSize(%q) = %d, want %d", tt.in, got, tt.want)
			}
		})
	}
}

func TestFormatSize(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0"}, {1, "1"}, {1000, "1000"}, {1024, "1KiB"}, {64 << 10, "64KiB"},
		{1 << 20, "1MiB"}, {256 << 20, "256MiB"}, {3 << 30, "3GiB"}, {1536, "1536"},
	}
	for _, tt := range tests {
		if got := FormatSize(tt.in); got != tt.want {
			t.Errorf("FormatSize(%d) = %q, want %q", tt.in, got, tt.want)
		}
		if back, err := ParseSize(FormatSize(tt.in)); err != nil || back != tt.in {
			t.Errorf("ParseSize(FormatSize(%d)) = %d, %v", tt.in, back, err)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"}, {20 * time.Millisecond, "20ms"}, {10 * time.Second, "10s"},
		{90 * time.Second, "1m30s"}, {time.Minute, "1m"}, {24 * time.Hour, "24h"},
		{90 * time.Minute, "1h30m"}, {time.Hour + time.Second, "1h0m1s"},
	}
	for _, tt := range tests {
		if got := FormatDuration(tt.in); got != tt.want {
			t.Errorf("FormatDuration(%v) = %q, want %q", tt.in, got, tt.want)
		}
		if back, err := parseDuration(FormatDuration(tt.in)); err != nil || back != tt.in {
			t.Errorf("parseDuration(FormatDuration(%v)) = %v, %v", tt.in, back, err)
		}
	}
}
