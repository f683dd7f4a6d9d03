/*
Copyright The itemops Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package main

import (
	"fmt"
	"html"
	"io"
	"strings"
	"time"

	"github.com/hinshun/vt10x"
)

// The glyph attributes vt10x keeps (its unexported attr* bits).
const (
	attrUnderline = 1 << 1
	attrBold      = 1 << 2
	attrItalic    = 1 << 4
)

// Screen is what a terminal shows at one moment.
type Screen struct {
	Cols, Rows int
	Cells      [][]vt10x.Glyph
}

// Snapshot copies what term shows now.
func Snapshot(term vt10x.Terminal) Screen {
	term.Lock()
	defer term.Unlock()
	cols, rows := term.Size()
	s := Screen{Cols: cols, Rows: rows, Cells: make([][]vt10x.Glyph, rows)}
	for y := range rows {
		s.Cells[y] = make([]vt10x.Glyph, cols)
		for x := range cols {
			s.Cells[y][x] = term.Cell(x, y)
		}
	}
	return s
}

// Text is the screen's characters, a line per row, trailing spaces cut.
func (s Screen) Text() string {
	var b strings.Builder
	for _, row := range s.Cells {
		var line strings.Builder
		for _, g := range row {
			line.WriteRune(printable(g.Char))
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
	return b.String()
}

// usedRows is the number of rows down to the last one that shows something.
func (s Screen) usedRows() int {
	for y := s.Rows - 1; y >= 0; y-- {
		for _, g := range s.Cells[y] {
			if printable(g.Char) != ' ' || g.BG != vt10x.DefaultBG {
				return y + 1
			}
		}
	}
	return 0
}

// usedCols is the number of columns up to the last one that shows something.
func (s Screen) usedCols() int {
	used := 0
	for _, row := range s.Cells {
		for x := len(row) - 1; x >= used; x-- {
			if printable(row[x].Char) != ' ' || row[x].BG != vt10x.DefaultBG {
				used = x + 1
				break
			}
		}
	}
	return used
}

func printable(r rune) rune {
	if r < ' ' {
		return ' '
	}
	return r
}

// Frame is a screen shown for a while.
type Frame struct {
	Screen Screen
	For    time.Duration
}

// Geometry of the picture, in pixels: a monospace cell of 8.4 × 18 at
// 14px, inside a padded dark window.
const (
	cellWidth  = 8.4
	cellHeight = 18.0
	fontSize   = 14
	padding    = 14.0
)

// WriteSVG draws frames as one SVG: a still picture for one frame, an
// animation over them, looping, for more. Every frame is cropped to the
// rows and columns the largest of them uses.
func WriteSVG(w io.Writer, frames []Frame) error {
	if len(frames) == 0 {
		return fmt.Errorf("no frame to draw")
	}
	rows, cols := 0, 0
	for _, f := range frames {
		rows, cols = max(rows, f.Screen.usedRows()), max(cols, f.Screen.usedCols())
	}
	if rows == 0 {
		return fmt.Errorf("every frame is empty")
	}
	width, height := 2*padding+float64(cols)*cellWidth, 2*padding+float64(rows)*cellHeight
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="ui-monospace,SFMono-Regular,Menlo,Consolas,'DejaVu Sans Mono',monospace" font-size="%d">`+"\n",
		width, height, width, height, fontSize)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" rx="8" fill="%s"/>`+"\n", palette.bg)
	if len(frames) > 1 {
		writeAnimation(&b, frames)
	}
	for i, f := range frames {
		if len(frames) > 1 {
			fmt.Fprintf(&b, `<g class="f%d">`+"\n", i)
		} else {
			b.WriteString("<g>\n")
		}
		drawScreen(&b, f.Screen, rows, cols)
		b.WriteString("</g>\n")
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeAnimation shows each frame for its time, one after the other, and
// starts again: CSS keyframes whose steps hold each value until the next.
func writeAnimation(b *strings.Builder, frames []Frame) {
	var total time.Duration
	for _, f := range frames {
		total += f.For
	}
	b.WriteString("<style>\n")
	var at time.Duration
	for i, f := range frames {
		from := 100 * float64(at) / float64(total)
		to := 100 * float64(at+f.For) / float64(total)
		// Without animation (an SVG renderer that ignores CSS) the last
		// frame, the outcome, is what shows.
		base := 0
		if i == len(frames)-1 {
			base = 1
		}
		fmt.Fprintf(b, ".f%d{opacity:%d;animation:k%d %.2fs steps(1,end) infinite}", i, base, i, total.Seconds())
		if i == 0 {
			fmt.Fprintf(b, "@keyframes k%d{0%%{opacity:1}%.3f%%{opacity:0}100%%{opacity:0}}\n", i, to)
		} else {
			fmt.Fprintf(b, "@keyframes k%d{0%%{opacity:0}%.3f%%{opacity:1}%.3f%%{opacity:0}100%%{opacity:0}}\n", i, from, to)
		}
		at += f.For
	}
	b.WriteString("</style>\n")
}

// style is how a run of glyphs is drawn.
type style struct {
	fg, bg               string
	bold, italic, underl bool
}

func styleOf(g vt10x.Glyph) style {
	return style{fg: palette.color(g.FG, true), bg: palette.color(g.BG, false),
		bold: g.Mode&attrBold != 0, italic: g.Mode&attrItalic != 0, underl: g.Mode&attrUnderline != 0}
}

// drawScreen writes the backgrounds, then the text, of rows × cols cells,
// a run of same-styled glyphs at a time, each placed at its column so that
// a font a little wider or narrower never shifts the next.
func drawScreen(b *strings.Builder, s Screen, rows, cols int) {
	for y := 0; y < rows && y < s.Rows; y++ {
		row := s.Cells[y][:min(cols, len(s.Cells[y]))]
		for x := 0; x < len(row); {
			st := styleOf(row[x])
			end := x + 1
			for end < len(row) && styleOf(row[end]) == st {
				end++
			}
			if st.bg != palette.bg {
				fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n",
					padding+float64(x)*cellWidth, padding+float64(y)*cellHeight, float64(end-x)*cellWidth, cellHeight, st.bg)
			}
			x = end
		}
		var line strings.Builder
		for x := 0; x < len(row); {
			st := styleOf(row[x])
			end := x + 1
			for end < len(row) && styleOf(row[end]) == st {
				end++
			}
			var text strings.Builder
			for _, g := range row[x:end] {
				text.WriteRune(printable(g.Char))
			}
			if t := strings.TrimRight(text.String(), " "); t != "" {
				fmt.Fprintf(&line, `<tspan x="%.1f" fill="%s"%s>%s</tspan>`, padding+float64(x)*cellWidth, st.fg, attrs(st), html.EscapeString(t))
			}
			x = end
		}
		if line.Len() > 0 {
			fmt.Fprintf(b, `<text y="%.1f" xml:space="preserve">%s</text>`+"\n", padding+float64(y)*cellHeight+cellHeight*0.75, line.String())
		}
	}
}

func attrs(st style) string {
	var a string
	if st.bold {
		a += ` font-weight="bold"`
	}
	if st.italic {
		a += ` font-style="italic"`
	}
	if st.underl {
		a += ` text-decoration="underline"`
	}
	return a
}

// theme is the window's colours: a dark background and xterm's palette.
type theme struct {
	fg, bg string
	ansi   [16]string
}

var palette = theme{
	fg: "#d8dee9", bg: "#1e222a",
	ansi: [16]string{"#3b4252", "#e06c75", "#98c379", "#e5c07b", "#61afef", "#c678dd", "#56b6c2", "#d8dee9",
		"#5c6370", "#ff7a85", "#b5e890", "#ffd68a", "#82c4ff", "#de9bf0", "#7fd4df", "#ffffff"},
}

// color is a vt10x colour as SVG: the default foreground or background, one
// of the 16 ANSI colours, xterm's 256-colour cube and greys, or 24-bit RGB.
func (t theme) color(c vt10x.Color, foreground bool) string {
	switch {
	case c == vt10x.DefaultFG:
		return t.fg
	case c == vt10x.DefaultBG:
		return t.bg
	case c < 16:
		return t.ansi[c]
	case c < 232:
		i := int(c) - 16
		level := func(v int) int {
			if v == 0 {
				return 0
			}
			return 55 + 40*v
		}
		return fmt.Sprintf("#%02x%02x%02x", level(i/36), level(i/6%6), level(i%6))
	case c < 256:
		v := 8 + 10*(int(c)-232)
		return fmt.Sprintf("#%02x%02x%02x", v, v, v)
	case c < 1<<24:
		return fmt.Sprintf("#%06x", uint32(c))
	}
	if foreground {
		return t.fg
	}
	return t.bg
}
