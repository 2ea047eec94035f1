package status

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestChartWithoutSamples(t *testing.T) {
	var svg strings.Builder
	writeChart(&svg, "rates", nil, time.Now(), time.Hour, rateLines)
	if s := svg.String(); !strings.HasPrefix(s, "<svg") || !strings.Contains(s, "no samples yet") || strings.Contains(s, "<path") {
		t.Fatalf("empty chart:\n%s", s)
	}
}

// TestChartLabelsFit: every label of a chart lies inside the image (in
// DejaVu Sans a digit is 0.64 of the font size wide, m 0.97, no lower-case
// letter or sign wider than those), and
// on a phone 360 px wide, where the chart is about 320 px, the labels are
// at least 10 px high.
func TestChartLabelsFit(t *testing.T) {
	if px := float64(fontSize) * 320 / chartW; px < 10 {
		t.Errorf("labels %.1f px high on a 360 px phone, want 10 or more", px)
	}
	text := regexp.MustCompile(`<text x="([0-9.]+)" y="[0-9.]+"( text-anchor="(start|middle|end)")?[^>]*>([^<]*)</text>`)
	now := time.Unix(3_000_000, 0)
	for _, span := range []time.Duration{5 * time.Minute, 17 * time.Minute, time.Hour} {
		var ps []point
		for i := range 20 {
			ps = append(ps, point{t: now.Add(-span + time.Duration(i)*span/19), in: 12345, out: 9.5, backlog: 1.2e6})
		}
		for _, lines := range [][]line{rateLines, backlogLines} {
			var svg strings.Builder
			writeChart(&svg, "t", ps, now, span, lines)
			labels := text.FindAllStringSubmatch(svg.String(), -1)
			if len(labels) < 6 {
				t.Fatalf("span %v: %d labels in\n%s", span, len(labels), svg.String())
			}
			for _, m := range labels {
				x, _ := strconv.ParseFloat(m[1], 64)
				w := 0.0
				for _, r := range m[4] {
					switch r {
					case 'm', 'M', 'w':
						w += 0.98 * fontSize
					default:
						w += 0.64 * fontSize
					}
				}
				lo, hi := x, x+w
				switch m[3] {
				case "middle":
					lo, hi = x-w/2, x+w/2
				case "end":
					lo, hi = x-w, x
				}
				if lo < 0 || hi > chartW {
					t.Errorf("span %v: label %q spans %.0f..%.0f, outside 0..%d", span, m[4], lo, hi, chartW)
				}
			}
		}
	}
}
