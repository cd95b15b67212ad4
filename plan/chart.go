package plan

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Point is one plotted point, in data units.
type Point struct {
	// X is the value on the horizontal axis.
	X float64
	// Y is the value on the vertical axis.
	Y float64
}

// Series is one named line of a Chart: its points joined in order, each
// drawn as a dot.
type Series struct {
	// Name is shown in the legend and written as the data-series attribute.
	Name string
	// Points are plotted in order; X need not be evenly spaced.
	Points []Point
}

// Mark is a highlighted point with a label, e.g. the user's configuration.
type Mark struct {
	// X and Y locate the mark, in data units.
	X, Y float64
	// Label is written next to the mark.
	Label string
}

// Chart is a line chart with axes, ticks, labels, a legend, the plotted
// points and marks. WriteSVG renders it.
type Chart struct {
	// Title is written above the plot.
	Title string
	// Subtitle, optional, is written under the title in a smaller font:
	// the inputs the chart was drawn for.
	Subtitle string
	// XLabel and YLabel name the axes, with their units.
	XLabel, YLabel string
	// LogY asks for a logarithmic vertical axis. It is ignored (the axis is
	// linear) unless every Y of the series and marks is > 0.
	LogY bool
	// Series are the lines; at least one point in all is needed.
	Series []Series
	// Marks are highlighted points.
	Marks []Mark
	// MarkName is the legend entry of the marks. Defaults to "marked".
	MarkName string
}

// Geometry of the rendered SVG, in pixels.
const (
	chartWidth  = 800
	chartHeight = 480
	plotLeft    = 90
	plotRight   = 590 // the legend is to the right of it
	plotTop     = 64
	plotBottom  = 410
)

// palette colours the series in order.
var palette = []string{"#1f6fb4", "#d9541e", "#2e9a44", "#8e44ad", "#7f7f7f", "#b8860b"}

// ErrEmptyChart is returned by WriteSVG for a chart without points.
var ErrEmptyChart = errors.New("plan: chart has no points")

// WriteSVG writes the chart as a standalone SVG 1.1 document. Every point
// of every series is a <circle class="point"> with data-series, data-x and
// data-y attributes giving its data values (the shortest text that parses
// back to the same float64, written like encoding/json writes numbers), and
// every mark a <circle class="mark"> with data-x, data-y and data-label, so
// that tools and tests can read the plotted values back.
func (c Chart) WriteSVG(w io.Writer) error {
	var all []Point
	for _, s := range c.Series {
		all = append(all, s.Points...)
	}
	if len(all) == 0 {
		return ErrEmptyChart
	}
	for _, m := range c.Marks {
		all = append(all, Point{m.X, m.Y})
	}
	for _, p := range all {
		if math.IsNaN(p.X) || math.IsInf(p.X, 0) || math.IsNaN(p.Y) || math.IsInf(p.Y, 0) {
			return fmt.Errorf("plan: chart point (%v, %v) is not finite", p.X, p.Y)
		}
	}
	xs := linearAxis(all, func(p Point) float64 { return p.X })
	logY := c.LogY
	for _, p := range all {
		logY = logY && p.Y > 0
	}
	var ys axis
	if logY {
		ys = logAxis(all)
	} else {
		ys = linearAxis(all, func(p Point) float64 { return p.Y })
	}
	px := func(x float64) float64 { return plotLeft + xs.frac(x)*(plotRight-plotLeft) }
	py := func(y float64) float64 { return plotBottom - ys.frac(y)*(plotBottom-plotTop) }

	var b bytes.Buffer
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartWidth, chartHeight, chartWidth, chartHeight)
	fmt.Fprintf(&b, "<title>%s</title>\n", esc(c.Title))
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`+"\n", chartWidth, chartHeight)
	fmt.Fprintf(&b, `<text class="title" x="%d" y="24" text-anchor="middle" font-size="15" font-weight="bold">%s</text>`+"\n",
		chartWidth/2, esc(c.Title))
	if c.Subtitle != "" {
		fmt.Fprintf(&b, `<text class="subtitle" x="%d" y="42" text-anchor="middle" fill="#555555">%s</text>`+"\n",
			chartWidth/2, esc(c.Subtitle))
	}

	// Grid, ticks and tick labels.
	b.WriteString(`<g class="x-axis" stroke="#000000">` + "\n")
	for _, t := range xs.ticks {
		x := px(t)
		fmt.Fprintf(&b, `<line class="grid" x1="%s" y1="%d" x2="%s" y2="%d" stroke="#e0e0e0"/>`+"\n", num(x), plotTop, num(x), plotBottom)
		fmt.Fprintf(&b, `<line class="tick" x1="%s" y1="%d" x2="%s" y2="%d"/>`+"\n", num(x), plotBottom, num(x), plotBottom+5)
		fmt.Fprintf(&b, `<text class="tick-label" x="%s" y="%d" text-anchor="middle" stroke="none">%s</text>`+"\n",
			num(x), plotBottom+19, esc(xs.label(t)))
	}
	fmt.Fprintf(&b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/>`+"\n", plotLeft, plotBottom, plotRight, plotBottom)
	b.WriteString("</g>\n")
	b.WriteString(`<g class="y-axis" stroke="#000000">` + "\n")
	for _, t := range ys.ticks {
		y := py(t)
		fmt.Fprintf(&b, `<line class="grid" x1="%d" y1="%s" x2="%d" y2="%s" stroke="#e0e0e0"/>`+"\n", plotLeft, num(y), plotRight, num(y))
		fmt.Fprintf(&b, `<line class="tick" x1="%d" y1="%s" x2="%d" y2="%s"/>`+"\n", plotLeft-5, num(y), plotLeft, num(y))
		fmt.Fprintf(&b, `<text class="tick-label" x="%d" y="%s" text-anchor="end" stroke="none">%s</text>`+"\n",
			plotLeft-8, num(y+4), esc(ys.label(t)))
	}
	fmt.Fprintf(&b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/>`+"\n", plotLeft, plotTop, plotLeft, plotBottom)
	b.WriteString("</g>\n")
	fmt.Fprintf(&b, `<text class="x-label" x="%d" y="%d" text-anchor="middle">%s</text>`+"\n",
		(plotLeft+plotRight)/2, plotBottom+44, esc(c.XLabel))
	fmt.Fprintf(&b, `<text class="y-label" x="0" y="0" text-anchor="middle" transform="translate(22 %d) rotate(-90)">%s</text>`+"\n",
		(plotTop+plotBottom)/2, esc(c.YLabel))

	// Series: a polyline and one circle per point.
	for i, s := range c.Series {
		col := palette[i%len(palette)]
		fmt.Fprintf(&b, `<g class="series" data-series="%s">`+"\n", esc(s.Name))
		if len(s.Points) > 1 {
			pts := make([]string, len(s.Points))
			for j, p := range s.Points {
				pts[j] = num(px(p.X)) + "," + num(py(p.Y))
			}
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), col)
		}
		for _, p := range s.Points {
			fmt.Fprintf(&b, `<circle class="point" data-series="%s" data-x="%s" data-y="%s" cx="%s" cy="%s" r="3.5" fill="%s"/>`+"\n",
				esc(s.Name), dataNum(p.X), dataNum(p.Y), num(px(p.X)), num(py(p.Y)), col)
		}
		b.WriteString("</g>\n")
	}

	// Marks.
	if len(c.Marks) > 0 {
		b.WriteString(`<g class="marks">` + "\n")
		for _, m := range c.Marks {
			x, y := px(m.X), py(m.Y)
			fmt.Fprintf(&b, `<circle class="mark" data-x="%s" data-y="%s" data-label="%s" cx="%s" cy="%s" r="7" fill="none" stroke="#c0392b" stroke-width="2.5"/>`+"\n",
				dataNum(m.X), dataNum(m.Y), esc(m.Label), num(x), num(y))
			// Beside the mark where the label fits, else centred above it.
			w := 6.6 * float64(len([]rune(m.Label)))
			anchor, lx, ly := "start", x+10, y-10
			switch {
			case x+10+w <= plotRight:
			case x-10-w >= plotLeft:
				anchor, lx = "end", x-10
			default:
				anchor, lx, ly = "middle", math.Min(math.Max(x, plotLeft+w/2), plotRight-w/2), y-16
			}
			if ly < plotTop+12 {
				ly = y + 24
			}
			fmt.Fprintf(&b, `<text class="mark-label" x="%s" y="%s" text-anchor="%s" fill="#c0392b">%s</text>`+"\n",
				num(lx), num(ly), anchor, esc(m.Label))
		}
		b.WriteString("</g>\n")
	}

	// Legend.
	b.WriteString(`<g class="legend">` + "\n")
	for i, s := range c.Series {
		y := plotTop + 10 + 22*i
		col := palette[i%len(palette)]
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", plotRight+16, y, plotRight+40, y, col)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", plotRight+46, y+4, esc(s.Name))
	}
	if len(c.Marks) > 0 {
		y := plotTop + 10 + 22*len(c.Series)
		fmt.Fprintf(&b, `<circle cx="%d" cy="%d" r="6" fill="none" stroke="#c0392b" stroke-width="2.5"/>`+"\n", plotRight+28, y)
		name := c.MarkName
		if name == "" {
			name = "marked"
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", plotRight+46, y+4, esc(name))
	}
	b.WriteString("</g>\n</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// axis maps data values to [0, 1] and carries the ticks to draw.
type axis struct {
	lo, hi float64 // data range (log10 of it for a log axis)
	log    bool
	ticks  []float64 // data values
	step   float64   // tick step, for labels
}

// frac returns v's position on the axis, 0 at lo and 1 at hi.
func (a axis) frac(v float64) float64 {
	if a.log {
		v = math.Log10(v)
	}
	return (v - a.lo) / (a.hi - a.lo)
}

// label formats a tick value.
func (a axis) label(v float64) string {
	if a.log {
		e := math.Round(math.Log10(v))
		if e >= 0 && e <= 6 {
			return fmtTick(v)
		}
		return "1e" + strconv.Itoa(int(e))
	}
	return fmtTick(v)
}

// linearAxis spans 0 (or the smallest value, if negative) to the largest
// value, widened to nice tick steps.
func linearAxis(pts []Point, get func(Point) float64) axis {
	lo, hi := 0.0, 0.0
	for _, p := range pts {
		lo, hi = math.Min(lo, get(p)), math.Max(hi, get(p))
	}
	if hi == lo {
		hi = lo + 1
	}
	step := niceStep((hi - lo) / 6)
	lo = math.Floor(lo/step) * step
	hi = math.Ceil(hi/step) * step
	a := axis{lo: lo, hi: hi, step: step}
	for i := 0; ; i++ {
		t := lo + float64(i)*step
		if t > hi+step/2 {
			break
		}
		a.ticks = append(a.ticks, roundTo(t, step))
	}
	return a
}

// logAxis spans whole decades around the values; all must be > 0.
func logAxis(pts []Point) axis {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range pts {
		l := math.Log10(p.Y)
		lo, hi = math.Min(lo, l), math.Max(hi, l)
	}
	lo, hi = math.Floor(lo), math.Ceil(hi)
	if hi == lo {
		hi = lo + 1
	}
	every := math.Ceil((hi - lo) / 10) // at most about 10 labelled decades
	a := axis{lo: lo, hi: hi, log: true, step: every}
	for e := lo; e <= hi; e += every {
		a.ticks = append(a.ticks, math.Pow(10, e))
	}
	return a
}

// niceStep returns 1, 2 or 5 times a power of ten, at least x.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x*(1-1e-12) {
			return m * p
		}
	}
	return 10 * p
}

// roundTo removes floating-point noise from a multiple of step.
func roundTo(v, step float64) float64 {
	digits := -int(math.Floor(math.Log10(step))) + 1
	if digits < 0 {
		digits = 0
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'f', digits, 64), 64)
	return r
}

// fmtTick formats a tick value compactly: 1200000 → "1.2M", 450 → "450",
// 0.25 → "0.25".
func fmtTick(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e12:
		return strconv.FormatFloat(v, 'g', 3, 64)
	case a >= 1e9:
		return strconv.FormatFloat(v/1e9, 'f', -1, 64) + "G"
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	default:
		return strconv.FormatFloat(v, 'g', 6, 64)
	}
}

// dataNum formats a data value as encoding/json does: the shortest text
// that parses back to v, in exponent form only below 1e-6 or from 1e21.
func dataNum(v float64) string {
	if a := math.Abs(v); a != 0 && (a < 1e-6 || a >= 1e21) {
		return strconv.FormatFloat(v, 'e', -1, 64)
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// num formats a pixel coordinate with at most two decimals.
func num(v float64) string {
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}

// esc escapes s for XML text and attribute values.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
