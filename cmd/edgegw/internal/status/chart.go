package status

import (
	"fmt"
	"html"
	"io"
	"strings"
	"time"
)

// Chart geometry (SVG user units; the image scales to the page width).
// A unit is about a CSS pixel on a phone: a 360 px wide screen leaves the
// chart about 320 px, so the 11-unit labels are read at about 11 px; the
// page caps the image at 440 px (style.css) for wider screens.
const (
	chartW, chartH = 320, 120
	padL, padR     = 38, 6
	padT, padB     = 8, 20
	fontSize       = 11
)

// line is one series of a chart.
type line struct {
	label, color string
	rate         bool // a per-second rate: the first sample has no interval before it
	v            func(point) float64
}

// writeChart writes a line chart of ps over the last span as a standalone
// SVG document: the y axis from 0 to the largest value, the x axis in
// minutes before now.
func writeChart(w io.Writer, title string, ps []point, now time.Time, span time.Duration, lines []line) {
	top := 0.0
	for _, p := range ps {
		for _, l := range lines {
			top = max(top, l.v(p))
		}
	}
	if top <= 0 {
		top = 1
	}
	x := func(t time.Time) float64 {
		f := 1 - now.Sub(t).Seconds()/span.Seconds()
		return padL + max(f, 0)*(chartW-padL-padR)
	}
	y := func(v float64) float64 { return padT + (1-v/top)*(chartH-padT-padB) }
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" role="img" aria-label="%s" font-family="sans-serif" font-size="%d">`,
		chartW, chartH, html.EscapeString(title), fontSize)
	fmt.Fprintf(w, `<rect x="%d" y="%d" width="%d" height="%d" fill="#fff" stroke="#ccc"/>`, padL, padT, chartW-padL-padR, chartH-padT-padB)
	for _, f := range []float64{0, 0.5, 1} {
		fmt.Fprintf(w, `<text x="%d" y="%.1f" text-anchor="end" fill="#555">%s</text>`, padL-4, y(top*f)+4, shortNum(top*f))
	}
	step := 1
	for _, st := range []int{1, 2, 5, 10, 15, 30} {
		step = st
		if int(span/time.Minute)/st <= 5 {
			break
		}
	}
	// The labels stay inside the image: "now" ends at the right edge, the
	// others are centred on their minute, the leftmost at padL at most a
	// label's half width from the left edge.
	for m := 0; m <= int(span/time.Minute); m += step {
		xx := x(now.Add(-time.Duration(m) * time.Minute))
		if m == 0 {
			fmt.Fprintf(w, `<text x="%.1f" y="%d" text-anchor="end" fill="#555">now</text>`, xx, chartH-5)
			continue
		}
		fmt.Fprintf(w, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">-%dm</text>`, xx, chartH-5, m)
	}
	for i, l := range lines {
		var b strings.Builder
		for j, p := range ps {
			if now.Sub(p.t) > span {
				continue
			}
			if j == 0 && l.rate {
				continue
			}
			sep := " L"
			if b.Len() == 0 {
				sep = "M"
			}
			fmt.Fprintf(&b, "%s%.1f %.1f", sep, x(p.t), y(l.v(p)))
		}
		if b.Len() > 0 {
			fmt.Fprintf(w, `<path d="%s" fill="none" stroke="%s" stroke-width="2"/>`, b.String(), l.color)
		}
		fmt.Fprintf(w, `<text x="%d" y="%d" fill="%s">%s</text>`, padL+6+i*90, padT+fontSize+2, l.color, html.EscapeString(l.label))
	}
	if len(ps) == 0 {
		fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="middle" fill="#888">no samples yet</text>`, chartW/2, chartH/2)
	}
	io.WriteString(w, `</svg>`)
}

// shortNum writes an axis label: 0, 12, 3.5k, 1.2M.
func shortNum(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v == float64(int64(v)):
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("%.1f", v)
}

// The two charts of a bridge.
var (
	rateLines = []line{
		{"in /s", "#1f77b4", true, func(p point) float64 { return p.in }},
		{"out /s (acked)", "#2ca02c", true, func(p point) float64 { return p.out }},
	}
	backlogLines = []line{
		{"backlog", "#d62728", false, func(p point) float64 { return p.backlog }},
	}
)
