package results

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Plot size: 8 x 5 inches, 768 x 480 pixels at the PNG's 96 dpi.
const (
	plotWidth  = 8 * vg.Inch
	plotHeight = 5 * vg.Inch
)

// plotColors is a palette of well-separated dark colours (Tableau 10).
var plotColors = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff},
	color.RGBA{0xff, 0x7f, 0x0e, 0xff},
	color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	color.RGBA{0xd6, 0x27, 0x28, 0xff},
	color.RGBA{0x94, 0x67, 0xbd, 0xff},
	color.RGBA{0x8c, 0x56, 0x4b, 0xff},
	color.RGBA{0xe3, 0x77, 0xc2, 0xff},
	color.RGBA{0x7f, 0x7f, 0x7f, 0xff},
	color.RGBA{0xbc, 0xbd, 0x22, 0xff},
	color.RGBA{0x17, 0xbe, 0xcf, 0xff},
}

// plotGlyphs are the point shapes, cycled with the colours.
var plotGlyphs = []draw.GlyphDrawer{
	draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{},
	draw.PlusGlyph{}, draw.CrossGlyph{}, draw.RingGlyph{}, draw.BoxGlyph{}, draw.PyramidGlyph{},
}

// plotSeries is one line of the plot.
type plotSeries struct {
	label string
	pts   plotter.XYs
	errs  plotter.YErrors
	hasCI bool
}

// PlotAverageEM writes a PNG plot (768 x 480 pixels) to path of average EM
// (%) against training step: one line with points per run, keyed by run
// name (runs in sorted order), and per strategy when a run has several
// (labelled "run/strategy"); summaries are usually those of
// SummariseRun(dir, true). Where every point of a line has a confidence
// interval (HasCI) it is drawn as error bars. Summaries with a negative
// Step (reference rows) are skipped. The file is written atomically (a
// temporary file in the same directory, renamed over path).
func PlotAverageEM(path string, runs map[string][]RunSummary) error {
	var series []plotSeries
	for _, name := range slices.Sorted(maps.Keys(runs)) {
		var strategies []string
		byStrategy := map[string][]RunSummary{}
		for _, s := range runs[name] {
			if s.Step < 0 {
				continue
			}
			if _, ok := byStrategy[s.Strategy]; !ok {
				strategies = append(strategies, s.Strategy)
			}
			byStrategy[s.Strategy] = append(byStrategy[s.Strategy], s)
		}
		for _, st := range strategies {
			ss := byStrategy[st]
			sort.SliceStable(ss, func(a, b int) bool { return ss[a].Step < ss[b].Step })
			label := name
			if len(strategies) > 1 {
				label = name + "/" + st
			}
			ps := plotSeries{label: label, hasCI: true}
			for _, s := range ss {
				y := 100 * s.AvgEM
				ps.pts = append(ps.pts, plotter.XY{X: float64(s.Step), Y: y})
				if s.HasCI && validCI(s.AvgCI) {
					ps.errs = append(ps.errs, struct{ Low, High float64 }{y - 100*s.AvgCI[0], 100*s.AvgCI[1] - y})
				} else {
					ps.hasCI = false
				}
			}
			series = append(series, ps)
		}
	}
	if len(series) == 0 {
		return errors.New("plot: no evaluations to plot")
	}

	// With error bars, spread the series a little sideways so that bars at
	// the same step do not hide each other.
	xMin, xMax := math.Inf(1), math.Inf(-1)
	anyCI := false
	for _, s := range series {
		for _, pt := range s.pts {
			xMin, xMax = math.Min(xMin, pt.X), math.Max(xMax, pt.X)
		}
		anyCI = anyCI || s.hasCI
	}
	if anyCI && len(series) > 1 && xMax > xMin {
		for i, s := range series {
			dx := (float64(i) - float64(len(series)-1)/2) * 0.006 * (xMax - xMin)
			for j := range s.pts {
				s.pts[j].X += dx
			}
		}
	}

	p := newStepPlot("Average EM by training step", "average EM (%)")
	p.Legend.Top = false
	p.Legend.Left = false
	p.Legend.XOffs = -vg.Points(6)
	p.Legend.YOffs = vg.Points(6)
	yMax := 0.0
	for i, s := range series {
		c := plotColors[i%len(plotColors)]
		line, points, err := plotter.NewLinePoints(s.pts)
		if err != nil {
			return fmt.Errorf("plot %s: %w", s.label, err)
		}
		line.Color = c
		line.Width = vg.Points(1.5)
		points.Color = c
		points.Shape = plotGlyphs[i%len(plotGlyphs)]
		points.Radius = vg.Points(3)
		p.Add(line, points)
		p.Legend.Add(s.label, line, points)
		for j, pt := range s.pts {
			top := pt.Y
			if s.hasCI {
				top += s.errs[j].High
			}
			yMax = math.Max(yMax, top)
		}
		if s.hasCI {
			bars, err := plotter.NewYErrorBars(struct {
				plotter.XYs
				plotter.YErrors
			}{s.pts, s.errs})
			if err != nil {
				return fmt.Errorf("plot %s: %w", s.label, err)
			}
			bars.Color = c
			p.Add(bars)
		}
	}
	emAxes(p, xMin, xMax, yMax, 1.15)
	p.X.Min -= 0.03 * (p.X.Max - p.X.Min)
	p.X.Max += 0.03 * (p.X.Max - p.X.Min)

	return savePNG(p, path)
}

// newStepPlot returns a plot of a percentage against training step: the
// title, integer ticks on x, nice ticks on y, the axis labels and a grid.
func newStepPlot(title, yLabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(14)
	p.Title.Padding = vg.Points(8)
	p.X.Tick.Marker = niceTicks{integer: true}
	p.Y.Tick.Marker = niceTicks{}
	p.X.Label.Text = "training step"
	p.Y.Label.Text = yLabel
	p.Add(plotter.NewGrid())
	return p
}

// savePNG renders p as a plotWidth x plotHeight PNG and writes it to path
// atomically.
func savePNG(p *plot.Plot, path string) error {
	wt, err := p.WriterTo(plotWidth, plotHeight, "png")
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	d := &RunDir{Path: filepath.Dir(path)}
	if err := d.WriteFileAtomic(filepath.Base(path), buf.Bytes()); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// niceTicks marks an axis every 1, 2 or 5 times a power of ten, about six
// to twelve major ticks over the range, with unlabelled minor ticks halfway.
type niceTicks struct {
	// integer keeps the step at least 1 (training steps).
	integer bool
}

// Ticks implements plot.Ticker.
func (t niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return []plot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'g', -1, 64)}}
	}
	raw := (hi - lo) / 8
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	if t.integer && step < 1 {
		step = 1
	}
	decimals := max(0, int(-math.Floor(math.Log10(step)+1e-9)))
	var ticks []plot.Tick
	for i := math.Ceil(lo / step); i*step <= hi+1e-9*step; i++ {
		v := i * step
		if v == 0 {
			v = 0 // not -0
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', decimals, 64)})
		if mid := v + step/2; mid <= hi && (!t.integer || step >= 2) {
			ticks = append(ticks, plot.Tick{Value: mid})
		}
	}
	if first := math.Ceil(lo/step) * step; first-step/2 >= lo && (!t.integer || step >= 2) {
		ticks = append(ticks, plot.Tick{Value: first - step/2})
	}
	return ticks
}

// emAxes sets an EM plot's axes: y from zero to yMax with head room (a
// factor, for the legend), rounded up to a multiple of 5 and at least 10;
// x over [xMin, xMax], widened by one either side when it is a point.
func emAxes(p *plot.Plot, xMin, xMax, yMax, head float64) {
	p.Y.Min = 0
	p.Y.Max = math.Max(10, math.Ceil(yMax*head/5)*5)
	p.X.Min, p.X.Max = xMin, xMax
	if p.X.Min == p.X.Max {
		p.X.Min--
		p.X.Max++
	}
}
