package main

// The chart: per scenario a column of two panels over time, live latency
// (log scale) above, backlog left below, fifo and live-first overlaid.
// Drawn pixel by pixel with bench/internal/pngdraw, like bench/report's
// latest.png.

import (
	"fmt"
	"image"
	"math"

	"github.com/edgegw/edgegw/bench/internal/pngdraw"
)

// The modes' colours.
var (
	colFIFO = pngdraw.Orange
	colLive = pngdraw.Blue
)

type panel struct{ x0, y0, x1, y1 int }

func (p panel) frame(img *image.RGBA) {
	pngdraw.Fill(img, p.x0, p.y1, p.x1, p.y1+2, pngdraw.Axis)
	pngdraw.Fill(img, p.x0-2, p.y0, p.x0, p.y1+2, pngdraw.Axis)
}

func chart(path string, recs []record) error {
	var scenarios []string
	tmax := 1.0
	for _, r := range recs {
		if len(scenarios) == 0 || scenarios[len(scenarios)-1] != r.Scenario {
			seen := false
			for _, s := range scenarios {
				seen = seen || s == r.Scenario
			}
			if !seen {
				scenarios = append(scenarios, r.Scenario)
			}
		}
		if n := len(r.Gen.Series); n > 0 {
			tmax = math.Max(tmax, r.Gen.Series[n-1].T)
		}
	}
	if len(scenarios) == 0 {
		return fmt.Errorf("no records")
	}
	const colW, h, left, gap = 560, 620, 70, 30
	w := left + len(scenarios)*colW
	img := pngdraw.New(w, h)
	tickEvery := 10.0
	for tmax/tickEvery > 12 {
		tickEvery *= 2
	}
	xOf := func(p panel, t float64) int { return p.x0 + int(float64(p.x1-p.x0)*t/tmax) }
	for i, sc := range scenarios {
		x0 := left + i*colW
		lat := panel{x0, 20, x0 + colW - gap, 280}
		bl := panel{x0, 330, x0 + colW - gap, 580}
		// Latency: log scale 10 ms .. 100 s.
		const lo, hi = 1e-2, 1e2
		yLat := func(sec float64) int {
			sec = math.Min(math.Max(sec, lo), hi)
			f := (math.Log10(sec) - math.Log10(lo)) / (math.Log10(hi) - math.Log10(lo))
			return lat.y1 - int(f*float64(lat.y1-lat.y0))
		}
		for _, s := range []struct {
			v     float64
			label string
		}{{0.01, "0.01"}, {0.1, "0.1"}, {1, "1"}, {10, "10"}, {100, "100s"}} {
			y := yLat(s.v)
			pngdraw.Fill(img, lat.x0, y, lat.x1, y+1, pngdraw.Grid)
			if i == 0 {
				pngdraw.Text(img, 4, y-5, 2, s.label)
			}
		}
		var backlog int64 = 1
		for _, r := range recs {
			if r.Scenario == sc {
				backlog = max(backlog, int64(r.Gen.Backlog))
			}
		}
		yBl := func(n int64) int { return bl.y1 - int(float64(bl.y1-bl.y0)*float64(n)/float64(backlog)) }
		for _, f := range []float64{0, 0.25, 0.5, 0.75, 1} {
			n := int64(f * float64(backlog))
			y := yBl(n)
			pngdraw.Fill(img, bl.x0, y, bl.x1, y+1, pngdraw.Grid)
			if i == 0 {
				pngdraw.Text(img, 4, y-5, 2, fmt.Sprintf("%dk", n/1000))
			}
		}
		for t := 0.0; t <= tmax; t += tickEvery {
			for _, p := range []panel{lat, bl} {
				x := xOf(p, t)
				pngdraw.Fill(img, x, p.y1, x+1, p.y1+6, pngdraw.Axis)
			}
			pngdraw.Text(img, xOf(bl, t)-4, bl.y1+12, 2, fmt.Sprintf("%.0f", t))
		}
		lat.frame(img)
		bl.frame(img)
		for _, r := range recs {
			if r.Scenario != sc {
				continue
			}
			c := colFIFO
			if r.Mode != "fifo" {
				c = colLive
			}
			px, py, pbx, pby := -1, -1, -1, -1
			for _, pt := range r.Gen.Series {
				x := xOf(lat, pt.T)
				if pt.LiveN > 0 {
					y := yLat(pt.LiveMaxMs / 1e3)
					if px >= 0 {
						pngdraw.Line(img, px, py, x, y, c)
					}
					px, py = x, y
				}
				y := yBl(pt.BacklogLeft)
				if pbx >= 0 {
					pngdraw.Line(img, pbx, pby, x, y, c)
				}
				pbx, pby = x, y
			}
			if a := r.Gen.AlarmAfterS; a > 0 && r.Gen.AlarmLatMs > 0 {
				// The alarm: a bar at its publication (the series starts at the
				// bridge's connection, the alarm's time at the link's), as
				// high as its latency.
				x := xOf(lat, a-r.Gen.ReconnectS)
				pngdraw.Fill(img, x, yLat(r.Gen.AlarmLatMs/1e3), x+4, lat.y1, c)
			}
		}
	}
	return pngdraw.Save(path, img)
}
