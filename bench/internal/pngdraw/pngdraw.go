// Package pngdraw is the little drawing the benchmark report tools need
// for their charts (bench/report's bar pairs, bench/lanesreport's time
// series): filled rectangles, 2-pixel lines and a 3x5 digit font on an
// image.RGBA, written as PNG with the standard library only.
package pngdraw

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
)

// The charts' colours: the two series (matplotlib's first two), axes,
// grid lines and text.
var (
	Blue   = color.RGBA{0x1f, 0x77, 0xb4, 0xff}
	Orange = color.RGBA{0xff, 0x7f, 0x0e, 0xff}
	Axis   = color.RGBA{0x40, 0x40, 0x40, 0xff}
	Grid   = color.RGBA{0xe0, 0xe0, 0xe0, 0xff}
	Ink    = color.RGBA{0x10, 0x10, 0x10, 0xff}
)

// glyphs is a 3x5 bitmap font for axis numbers and ratios; other runes
// are drawn as blanks.
var glyphs = map[rune][5]string{
	'0': {"###", "#.#", "#.#", "#.#", "###"}, '1': {".#.", "##.", ".#.", ".#.", "###"},
	'2': {"###", "..#", "###", "#..", "###"}, '3': {"###", "..#", "###", "..#", "###"},
	'4': {"#.#", "#.#", "###", "..#", "..#"}, '5': {"###", "#..", "###", "..#", "###"},
	'6': {"###", "#..", "###", "#.#", "###"}, '7': {"###", "..#", "..#", "..#", "..#"},
	'8': {"###", "#.#", "###", "#.#", "###"}, '9': {"###", "#.#", "###", "..#", "###"},
	'.': {"...", "...", "...", "...", ".#."}, '-': {"...", "...", "###", "...", "..."},
	'k': {"#..", "#.#", "##.", "#.#", "#.#"}, 's': {"...", ".##", ".#.", "..#", "##."},
	'x': {"...", "#.#", ".#.", "#.#", "..."},
}

// New returns a w x h white canvas.
func New(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	Fill(img, 0, 0, w, h, color.White)
	return img
}

// Fill paints the rectangle [x0,x1) x [y0,y1).
func Fill(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	for y := y0; y < y1; y++ {
		for x := x0; x < x1; x++ {
			img.Set(x, y, c)
		}
	}
}

// Text writes s in Ink with its top left at (x, y), each font pixel
// scale x scale, 4*scale pixels a character.
func Text(img *image.RGBA, x, y, scale int, s string) {
	for _, ch := range s {
		if g, ok := glyphs[ch]; ok {
			for row := range 5 {
				for col := range 3 {
					if g[row][col] == '#' {
						Fill(img, x+col*scale, y+row*scale, x+(col+1)*scale, y+(row+1)*scale, Ink)
					}
				}
			}
		}
		x += 4 * scale
	}
}

// Line draws a 2-pixel wide segment (Bresenham, one axis per step).
func Line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	err := dx + dy
	for {
		Fill(img, x0, y0, x0+2, y0+2, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * err; e2 >= dy {
			err += dy
			x0 += sx
		} else {
			err += dx
			y0 += sy
		}
	}
}

func abs(v int) int { return max(v, -v) }

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}

// Save writes img to path as PNG.
func Save(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return f.Close()
}
