package results

import (
	"errors"
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// StudyCurve is one variant's learning curve over seeds: at each Steps[i]
// the Mean, Min and Max over seeds of the held-out EM or of the training
// reward (fractions).
type StudyCurve struct {
	Label          string
	Steps          []int
	Mean, Min, Max []float64
}

// PlotStudyCurves writes a PNG (768 x 480 pixels) to path of the curves'
// values (%, yLabel on the axis: held-out EM, or the training reward)
// against training step: one line with points per curve, in the order
// given, with a translucent band from Min to Max over seeds. Curves with no
// steps are skipped; with none at all it is an error. The file is written
// atomically.
func PlotStudyCurves(path, title, yLabel string, curves []StudyCurve) error {
	p := newStepPlot(title, yLabel)
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(6)
	p.Legend.YOffs = -vg.Points(6)
	xMin, xMax, yMax := math.Inf(1), math.Inf(-1), 0.0
	n := 0
	for i, c := range curves {
		if len(c.Steps) == 0 {
			continue
		}
		col := plotColors[i%len(plotColors)]
		var pts, band plotter.XYs
		for j, st := range c.Steps {
			x := float64(st)
			pts = append(pts, plotter.XY{X: x, Y: 100 * c.Mean[j]})
			band = append(band, plotter.XY{X: x, Y: 100 * c.Max[j]})
			xMin, xMax, yMax = math.Min(xMin, x), math.Max(xMax, x), math.Max(yMax, 100*c.Max[j])
		}
		for j := len(c.Steps) - 1; j >= 0; j-- {
			band = append(band, plotter.XY{X: float64(c.Steps[j]), Y: 100 * c.Min[j]})
		}
		poly, err := plotter.NewPolygon(band)
		if err != nil {
			return fmt.Errorf("plot %s: %w", c.Label, err)
		}
		r, g, b, _ := col.RGBA()
		poly.Color = color.NRGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 0x40}
		poly.LineStyle.Width = 0
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return fmt.Errorf("plot %s: %w", c.Label, err)
		}
		line.Color, line.Width = col, vg.Points(1.5)
		points.Color, points.Shape, points.Radius = col, plotGlyphs[i%len(plotGlyphs)], vg.Points(3)
		p.Add(poly, line, points)
		p.Legend.Add(c.Label, line, points)
		n++
	}
	if n == 0 {
		return errors.New("plot: no evaluations to plot")
	}
	emAxes(p, xMin, xMax, yMax, 1.25)
	return savePNG(p, path)
}
