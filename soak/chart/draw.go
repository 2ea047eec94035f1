package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
)

var (
	white    = color.RGBA{255, 255, 255, 255}
	black    = color.RGBA{30, 30, 30, 255}
	grid     = color.RGBA{225, 225, 225, 255}
	shade    = color.RGBA{242, 246, 252, 255}
	blue     = color.RGBA{31, 94, 180, 255}
	lightBlu = color.RGBA{140, 180, 230, 255}
	orange   = color.RGBA{235, 125, 20, 255}
	green    = color.RGBA{40, 150, 60, 255}
	red      = color.RGBA{200, 30, 30, 255}
	gray     = color.RGBA{120, 120, 120, 255}
	purple   = color.RGBA{120, 60, 170, 255}
)

type panel struct {
	img              *image.RGBA
	x0, y0, x1, y1   int // plot area in pixels
	xmin, xmax, ymax float64
	unit             float64 // y tick labels are v/unit
}

func (p *panel) px(t float64) int {
	return p.x0 + int(math.Round((t-p.xmin)/(p.xmax-p.xmin)*float64(p.x1-p.x0)))
}

func (p *panel) py(v float64) int {
	return p.y1 - int(math.Round(v/p.ymax*float64(p.y1-p.y0)))
}

func fill(img *image.RGBA, r image.Rectangle, c color.Color) {
	draw.Draw(img, r, &image.Uniform{c}, image.Point{}, draw.Src)
}

// line draws a 2-pixel line; dash > 0 leaves gaps every dash pixels.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color, width, dash int) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e, n := dx+dy, 0
	for {
		if dash == 0 || (n/dash)%2 == 0 {
			for i := 0; i < width; i++ {
				for j := 0; j < width; j++ {
					img.Set(x0+i, y0+j, c)
				}
			}
		}
		n++
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func sign(x int) int {
	switch {
	case x < 0:
		return -1
	case x > 0:
		return 1
	}
	return 0
}

// niceStep returns a 1/2/5 x 10^k step giving about n ticks over span.
func niceStep(span float64, n int) float64 {
	if span <= 0 {
		return 1
	}
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func (p *panel) frame(ylabel string, yfmt func(float64) string, loadFrom, loadTo float64) {
	if !math.IsNaN(loadFrom) {
		fill(p.img, image.Rect(p.px(loadFrom), p.y0, p.px(loadTo)+1, p.y1), shade)
		drawText(p.img, p.px(loadFrom)+4, p.y0+4, "load", gray)
	}
	step := niceStep(p.ymax/p.unit, 5) * p.unit
	for v := 0.0; v <= p.ymax+step/1e6; v += step {
		y := p.py(v)
		line(p.img, p.x0, y, p.x1, y, grid, 1, 0)
		s := yfmt(v)
		drawText(p.img, p.x0-8-textWidth(s), y-glyphH/2, s, black)
	}
	xs := niceStep(p.xmax-p.xmin, 10)
	for t := math.Ceil(p.xmin/xs) * xs; t <= p.xmax+xs/1e6; t += xs {
		x := p.px(t)
		line(p.img, x, p.y0, x, p.y1, grid, 1, 0)
		s := fmt.Sprintf("%.0f", t)
		drawText(p.img, x-textWidth(s)/2, p.y1+6, s, black)
	}
	line(p.img, p.x0, p.y0, p.x0, p.y1, black, 1, 0)
	line(p.img, p.x0, p.y1, p.x1, p.y1, black, 1, 0)
	drawText(p.img, p.x0, p.y0-glyphH-6, ylabel, black)
}

// plot draws the series val over samples; a missing value breaks the line.
func (p *panel) plot(ss []sample, val func(sample) (float64, bool), c color.Color, width int) {
	havePrev := false
	var px, py int
	for _, s := range ss {
		v, ok := val(s)
		if !ok {
			havePrev = false
			continue
		}
		x, y := p.px(s.t), p.py(math.Min(v, p.ymax))
		if havePrev {
			line(p.img, px, py, x, y, c, width, 0)
		} else {
			line(p.img, x, y, x, y, c, width, 0)
		}
		px, py, havePrev = x, y, true
	}
}

func (p *panel) hline(v float64, c color.Color, label string) {
	y := p.py(v)
	line(p.img, p.x0, y, p.x1, y, c, 2, 8)
	drawText(p.img, p.x1-textWidth(label)-4, y-glyphH-4, label, c)
}

type legendItem struct {
	c     color.Color
	label string
	dash  bool
}

func legend(img *image.RGBA, x, y int, items []legendItem) {
	for _, it := range items {
		d := 0
		if it.dash {
			d = 6
		}
		line(img, x, y+glyphH/2, x+28, y+glyphH/2, it.c, 3, d)
		drawText(img, x+36, y, it.label, black)
		x += 36 + textWidth(it.label) + 28
	}
}

func col(k string) func(sample) (float64, bool) {
	return func(s sample) (float64, bool) { return s.get(k) }
}

func drawChart(path string, all []*series, st settings, rep *report) error {
	const W, H = 1200, 760
	img := image.NewRGBA(image.Rect(0, 0, W, H))
	fill(img, img.Bounds(), white)

	xmax, ymax := 1.0, st.budget
	loadFrom, loadTo := math.NaN(), math.NaN()
	for _, s := range all {
		for _, x := range s.samples {
			xmax = math.Max(xmax, x.t)
			if v, ok := x.get("rss_bytes"); ok {
				ymax = math.Max(ymax, v)
			}
			if v, ok := x.get("queued_bytes"); ok {
				ymax = math.Max(ymax, v)
			}
		}
	}
	for _, f := range rep.figs {
		if f.broker == "edgegw" || math.IsNaN(loadFrom) {
			loadFrom, loadTo = f.loadStart, f.loadEnd
		}
	}
	ymax *= 1.08

	title := rep.st.title
	if st.duration != "" {
		title += fmt.Sprintf(" - load %s, expiry %s - %s", st.duration, st.expiry, rep.verdict())
	}
	drawText(img, 90, 14, title, black)

	mem := &panel{img: img, x0: 90, y0: 90, x1: W - 30, y1: 500, xmin: 0, xmax: xmax, ymax: ymax, unit: 1 << 20}
	mem.frame("MiB", func(v float64) string { return fmt.Sprintf("%.0f", v/(1<<20)) }, loadFrom, loadTo)
	mem.hline(st.budget, red, fmt.Sprintf("memory_budget %s", mib(st.budget)))
	mem.hline(st.maxQueuedBytes, gray, fmt.Sprintf("max_queued_bytes %s", mib(st.maxQueuedBytes)))

	items := []legendItem{}
	for _, s := range all {
		if s.broker == "edgegw" {
			mem.plot(s.samples, col("heap_inuse_bytes"), lightBlu, 2)
			mem.plot(s.samples, col("queued_bytes"), orange, 2)
			mem.plot(s.samples, col("rss_bytes"), blue, 2)
			items = append(items, legendItem{blue, "edgegw RSS", false}, legendItem{lightBlu, "Go heap in use", false},
				legendItem{orange, "queued bytes", false})
		} else {
			mem.plot(s.samples, col("rss_bytes"), green, 2)
			items = append(items, legendItem{green, s.broker + " RSS", false})
		}
	}
	items = append(items, legendItem{red, "memory_budget", true})
	legend(img, 90, 40, items)

	// Lower panel: sessions held by edgegw (must fall to 0 after expiry).
	var eg *series
	for _, s := range all {
		if s.broker == "edgegw" {
			eg = s
		}
	}
	if eg != nil {
		smax := 1.0
		total := func(s sample) (float64, bool) {
			c, ok1 := s.get("sessions_connected")
			d, ok2 := s.get("sessions_disconnected")
			return c + d, ok1 && ok2
		}
		for _, x := range eg.samples {
			if v, ok := total(x); ok {
				smax = math.Max(smax, v)
			}
		}
		smax = math.Ceil(smax*1.2 + 0.5)
		sp := &panel{img: img, x0: 90, y0: 575, x1: W - 30, y1: 710, xmin: 0, xmax: xmax, ymax: smax, unit: 1}
		sp.frame("edgegw sessions", func(v float64) string { return fmt.Sprintf("%.0f", v) }, loadFrom, loadTo)
		sp.plot(eg.samples, total, purple, 4)
		sp.plot(eg.samples, col("sessions_connected"), green, 2)
		legend(img, 420, 575-glyphH-6, []legendItem{{purple, "all sessions", false}, {green, "connected", false}})
	}
	drawText(img, W/2-textWidth("seconds")/2, H-glyphH-8, "seconds", black)

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
