package status

import (
	"fmt"
	"time"
)

// formatBytes writes a size for people: 512 B, 3.4 KiB, 12.0 MiB.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// formatDuration writes a duration to the second: 42s, 3m05s, 2h10m, 3d4h.
func formatDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%dh", s/86400, s%86400/3600)
}

// formatRate writes messages per second, "–" when unknown.
func formatRate(v *float64) string {
	if v == nil {
		return "–"
	}
	if *v < 10 {
		return fmt.Sprintf("%.1f/s", *v)
	}
	return fmt.Sprintf("%.0f/s", *v)
}

// formatPct writes a as a percentage of b, "" without b.
func formatPct(a, b int64) string {
	if b <= 0 {
		return ""
	}
	return fmt.Sprintf("%.0f %%", 100*float64(a)/float64(b))
}

// etaOf is what the page shows as a bridge's time to empty, and its class:
// "eta alarm" when the backlog is not draining (BacklogState).
func etaOf(b Bridge) (text, class string) {
	switch {
	case b.BacklogState == BacklogNotDraining:
		return "not draining", "eta alarm"
	case b.BacklogState == BacklogKeepingUp:
		return "keeping up", "eta"
	case b.TimeToEmpty == nil: // unknown, or no history
		return "–", "eta"
	case *b.TimeToEmpty == 0:
		return "empty", "eta"
	}
	return formatDuration(time.Duration(*b.TimeToEmpty * float64(time.Second))), "eta"
}
