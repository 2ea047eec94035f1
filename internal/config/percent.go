package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParsePercent parses a share written "25%" (0 < share <= 100%) and
// returns it as a fraction (0.25).
func ParsePercent(s string) (float64, error) {
	num, ok := strings.CutSuffix(strings.TrimSpace(s), "%")
	if !ok {
		return 0, fmt.Errorf("%q: want a percentage such as 25%%", s)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || v <= 0 || v > 100 {
		return 0, fmt.Errorf("%q: want a percentage above 0%% and at most 100%%", s)
	}
	return v / 100, nil
}

// ParseBudget parses a period budget written "<size> per <duration>",
// e.g. "500MiB per 30d" (the duration may use d for 24h).
func ParseBudget(s string) (bytes int64, period time.Duration, err error) {
	size, per, ok := strings.Cut(strings.TrimSpace(s), " per ")
	if !ok {
		return 0, 0, fmt.Errorf("%q: want <size> per <duration>, e.g. 500MiB per 30d", s)
	}
	if bytes, err = ParseSize(size); err != nil || bytes <= 0 {
		return 0, 0, fmt.Errorf("%q: the size: want a size > 0 such as 500MiB", s)
	}
	per = strings.TrimSpace(per)
	if days, ok := strings.CutSuffix(per, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 {
			return 0, 0, fmt.Errorf("%q: the period: want a duration > 0 such as 30d or 12h", s)
		}
		return bytes, time.Duration(n) * 24 * time.Hour, nil
	}
	if period, err = time.ParseDuration(per); err != nil || period <= 0 {
		return 0, 0, fmt.Errorf("%q: the period: want a duration > 0 such as 30d or 12h", s)
	}
	return bytes, period, nil
}
