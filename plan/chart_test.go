package plan

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"
)

// svgCircle is a <circle> of a chart, with its data attributes.
type svgCircle struct {
	class, series, label string
	x, y, cx, cy         float64
}

// parseSVG decodes an SVG document completely with encoding/xml, checks
// that its root is an <svg> in the SVG namespace with a <title>, and
// returns its point and mark circles and its texts.
func parseSVG(t *testing.T, doc []byte) (points, marks []svgCircle, texts []string) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	depth, sawTitle := 0, false
	var inText bool
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("invalid XML: %v\n%s", err, doc)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if depth == 0 && (el.Name.Local != "svg" || el.Name.Space != "http://www.w3.org/2000/svg") {
				t.Fatalf("root element %v, want svg in the SVG namespace", el.Name)
			}
			depth++
			inText = el.Name.Local == "text" || el.Name.Local == "title"
			sawTitle = sawTitle || el.Name.Local == "title"
			if el.Name.Local != "circle" {
				continue
			}
			attr := map[string]string{}
			for _, a := range el.Attr {
				attr[a.Name.Local] = a.Value
			}
			c := svgCircle{class: attr["class"], series: attr["data-series"], label: attr["data-label"]}
			if c.class != "point" && c.class != "mark" {
				continue
			}
			for name, dst := range map[string]*float64{"data-x": &c.x, "data-y": &c.y, "cx": &c.cx, "cy": &c.cy} {
				v, err := strconv.ParseFloat(attr[name], 64)
				if err != nil {
					t.Fatalf("circle %v: %s = %q: %v", attr, name, attr[name], err)
				}
				*dst = v
			}
			if c.cx < plotLeft-0.01 || c.cx > plotRight+0.01 || c.cy < plotTop-0.01 || c.cy > plotBottom+0.01 {
				t.Errorf("circle %+v is drawn outside the plot area", c)
			}
			if c.class == "point" {
				points = append(points, c)
			} else {
				marks = append(marks, c)
			}
		case xml.EndElement:
			depth--
			inText = false
		case xml.CharData:
			if inText && strings.TrimSpace(string(el)) != "" {
				texts = append(texts, string(el))
			}
		}
	}
	if depth != 0 {
		t.Fatalf("unbalanced document (depth %d)", depth)
	}
	if !sawTitle {
		t.Error("no <title>")
	}
	return points, marks, texts
}

// checkChart renders c and checks that every point of every series and
// every mark is in the SVG with its exact values, in order, and that the
// axis labels are there.
func checkChart(t *testing.T, c Chart) (points, marks []svgCircle) {
	t.Helper()
	var b bytes.Buffer
	if err := c.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	points, marks, texts := parseSVG(t, b.Bytes())
	i := 0
	for _, s := range c.Series {
		for _, p := range s.Points {
			if i >= len(points) {
				t.Fatalf("SVG has %d points, the chart more", len(points))
			}
			got := points[i]
			if got.series != s.Name || got.x != p.X || got.y != p.Y {
				t.Errorf("point %d = %s (%v, %v), want %s (%v, %v)", i, got.series, got.x, got.y, s.Name, p.X, p.Y)
			}
			i++
		}
	}
	if i != len(points) {
		t.Errorf("SVG has %d points, the chart %d", len(points), i)
	}
	if len(marks) != len(c.Marks) {
		t.Fatalf("SVG has %d marks, want %d", len(marks), len(c.Marks))
	}
	for j, m := range c.Marks {
		if marks[j].x != m.X || marks[j].y != m.Y || marks[j].label != m.Label {
			t.Errorf("mark %d = %+v, want %+v", j, marks[j], m)
		}
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{c.XLabel, c.YLabel} {
		if !strings.Contains(all, want) {
			t.Errorf("axis label %q missing from the SVG texts", want)
		}
	}
	return points, marks
}

func TestOutageChart(t *testing.T) {
	r, err := Outage(OutageParams{Rate: 2000, Outage: 600 * time.Second, Schedule: mustInterval(t, 5, time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	c := r.Chart()
	points, marks := checkChart(t, c)
	byX := map[float64]float64{}
	for _, p := range points {
		byX[p.x] = p.y
	}
	// The seed figure's line: 2000·(600 − S), 0 from the outage on.
	for x, want := range map[float64]float64{0: 1_200_000, 100: 1_000_000, 600: 0} {
		if got, ok := byX[x]; !ok || got != want {
			t.Errorf("point at span %v = %v (present %v), want %v", x, got, ok, want)
		}
	}
	last := points[len(points)-1]
	if last.x <= 600 || last.y != 0 {
		t.Errorf("the sweep must go beyond the outage: last point %+v", last)
	}
	if marks[0].x != 240 || marks[0].y != 720000 {
		t.Errorf("configured point %+v, want (240, 720000)", marks[0])
	}
	// Larger dead-letter counts are drawn higher (smaller cy).
	if !(points[0].cy < byXcy(points, 600)) {
		t.Error("the y axis is upside down")
	}
}

// byXcy returns the cy of the point at x.
func byXcy(points []svgCircle, x float64) float64 {
	for _, p := range points {
		if p.x == x {
			return p.cy
		}
	}
	return -1
}

func TestOtherCharts(t *testing.T) {
	ind, _ := Independent(IndependentParams{Rate: 2000, FailureProb: 0.01, Attempts: 5})
	points, marks := checkChart(t, ind.Chart())
	if len(points) != 8 || points[2].y != 172.8 || marks[0].x != 5 || marks[0].y != 0.01728 {
		t.Errorf("independent chart: points %+v marks %+v", points, marks)
	}
	// A log axis puts the points at even vertical steps: each is 100× the next.
	step1, step2 := points[1].cy-points[0].cy, points[2].cy-points[1].cy
	if d := step1 - step2; d > 0.02 || d < -0.02 {
		t.Errorf("log axis steps %v and %v differ", step1, step2)
	}

	po, _ := Poison(PoisonParams{Rate: 2000, PoisonFraction: 1e-5, CrashAfter: 2 * time.Second,
		Redelivery: time.Minute, Attempts: 5, HandlerTime: 50 * time.Millisecond})
	points, marks = checkChart(t, po.Chart())
	if marks[0].x != 1 || marks[0].y != 57.6 || points[1].y != 57.6 || points[2].y != 115.2 {
		t.Errorf("poison chart: points %+v marks %+v", points[:3], marks)
	}

	s, _ := ExplicitDelays([]time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second})
	pa, _ := Partition(PartitionParams{Schedule: s, HandlerTime: 50 * time.Millisecond,
		PartitionRate: 20, PoisonPerDay: 1728, Partitions: 100})
	points, marks = checkChart(t, pa.Chart())
	if len(points) != 12 || points[5].y != 540.864/60 || marks[0].x != 5 || marks[0].y != 540.864/60 {
		t.Errorf("partition chart: points %+v marks %+v", points, marks)
	}

	d, _ := ParseDistribution("1:9,3:5,5:4,never:2")
	th, _ := Thresholds(d, []int{1, 2, 3, 5, 8})
	points, marks = checkChart(t, th.Chart())
	var wasted []float64
	for _, p := range points {
		if p.series == "wasted attempts" {
			wasted = append(wasted, p.y)
		}
	}
	if len(wasted) != 5 || wasted[0] != 11 || wasted[4] != 42 || marks[0].x != 5 || marks[0].y != 36 {
		t.Errorf("threshold chart: wasted %v marks %+v", wasted, marks)
	}
}

func TestChartEdgeCases(t *testing.T) {
	if err := (Chart{}).WriteSVG(io.Discard); !errors.Is(err, ErrEmptyChart) {
		t.Errorf("empty chart: %v, want ErrEmptyChart", err)
	}
	// Text is escaped; a flat series and a log axis with a zero still render.
	c := Chart{Title: `a <b> & "c"`, XLabel: "x", YLabel: "y", LogY: true,
		Series: []Series{{Name: "<zero>", Points: []Point{{0, 0}, {1, 0}}}}}
	checkChart(t, c)
	// Everything zero: outage without arrivals.
	r, _ := Outage(OutageParams{Rate: 0, Outage: 0, Schedule: mustInterval(t, 1, time.Second)})
	checkChart(t, r.Chart())
}
