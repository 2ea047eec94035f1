package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// sizeUnits maps a lower-cased unit suffix to its multiplier. IEC units
// (KiB, MiB, GiB) and the bare single letters (k, m, g: nginx/docker style)
// are powers of 1024; SI units with a B (kB, MB, GB) are powers of 1000.
var sizeUnits = map[string]float64{
	"":    1,
	"b":   1,
	"k":   1 << 10,
	"kib": 1 << 10,
	"kb":  1e3,
	"m":   1 << 20,
	"mib": 1 << 20,
	"mb":  1e6,
	"g":   1 << 30,
	"gib": 1 << 30,
	"gb":  1e9,
}

// ParseSize parses a size in bytes: a plain integer ("1048576") or a number
// with a unit: "512KiB", "4MiB", "1GiB" (1024-based), "64k", "16m", "1g"
// (1024-based), "1kB", "1MB", "1GB" (1000-based), "100B". Units are
// case-insensitive; a space between number and unit is allowed; fractions
// ("1.5MiB") are allowed when the result is a whole number of bytes.
func ParseSize(s string) (int64, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return 0, errors.New("empty size")
	}
	i := 0
	for i < len(in) && (in[i] >= '0' && in[i] <= '9' || in[i] == '.' || (i == 0 && (in[i] == '-' || in[i] == '+'))) {
		i++
	}
	num, unit := in[:i], strings.ToLower(strings.TrimSpace(in[i:]))
	mult, ok := sizeUnits[unit]
	if !ok || num == "" {
		return 0, fmt.Errorf("invalid size %q (want bytes or a number with a unit: 512KiB, 4MiB, 1GiB, 64k, 1MB)", s)
	}
	if !strings.Contains(num, ".") {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("invalid size %q: %w", s, err)
		}
		if mult == 1 {
			return n, nil
		}
		if m := int64(mult); n > math.MaxInt64/m || n < math.MinInt64/m {
			return 0, fmt.Errorf("invalid size %q: too large", s)
		}
		return n * int64(mult), nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid size %q: %w", s, err)
	}
	v := f * mult
	if v != math.Trunc(v) {
		return 0, fmt.Errorf("invalid size %q: not a whole number of bytes", s)
	}
	if v >= math.MaxInt64 || v <= math.MinInt64 {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return int64(v), nil
}

// FormatSize renders n bytes the way an operator would write it: the
// largest IEC unit that divides n exactly ("4MiB", "64KiB"), else bytes.
func FormatSize(n int64) string {
	switch {
	case n == 0:
		return "0"
	case n%GiB == 0:
		return strconv.FormatInt(n/GiB, 10) + "GiB"
	case n%MiB == 0:
		return strconv.FormatInt(n/MiB, 10) + "MiB"
	case n%KiB == 0:
		return strconv.FormatInt(n/KiB, 10) + "KiB"
	}
	return strconv.FormatInt(n, 10)
}

// FormatDuration renders d like time.Duration.String without the trailing
// zero units: "24h", "1m30s", "20ms", "0s".
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// parseDuration is time.ParseDuration with an operator-friendly error.
func parseDuration(s string) (time.Duration, error) {
	in := strings.TrimSpace(s)
	if in == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(in)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (want a number with a unit: 500ms, 10s, 1m30s, 24h)", s)
	}
	return d, nil
}
