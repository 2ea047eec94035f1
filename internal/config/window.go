package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Window is a bridge's max_inflight: "auto" (WindowAuto, the default)
// sizes what is in flight by the link; a number 1..65535 is a fixed cap
// on the unacknowledged upstream publishes. A literal 0 is refused
// rather than taken for auto, so that no one gets auto by accident.
type Window int

// WindowAuto is max_inflight: auto.
const WindowAuto Window = 0

// String renders w as written in the file.
func (w Window) String() string {
	if w == WindowAuto {
		return "auto"
	}
	return strconv.Itoa(int(w))
}

// parseWindow reads max_inflight from YAML or the environment.
func parseWindow(data any) (Window, error) {
	var n int
	switch d := data.(type) {
	case string:
		s := strings.TrimSpace(d)
		if strings.EqualFold(s, "auto") {
			return WindowAuto, nil
		}
		v, err := strconv.Atoi(s)
		if err != nil {
			return 0, fmt.Errorf("invalid value %q (want auto or a whole number)", d)
		}
		n = v
	case int:
		n = d
	case int64:
		n = int(d)
	case uint64:
		n = int(min(d, math.MaxInt32))
	case float64:
		if d != math.Trunc(d) {
			return 0, fmt.Errorf("%v is not a whole number", d)
		}
		n = int(d)
	default:
		return 0, fmt.Errorf("invalid value %v (want auto or a whole number)", data)
	}
	if n == 0 {
		return 0, fmt.Errorf("0: write auto to size the window by the link, or a number 1..%d", maxInflightMQTT)
	}
	return Window(n), nil
}
