package config

import (
	"fmt"
	"strconv"
	"strings"
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
