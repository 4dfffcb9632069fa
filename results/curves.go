package results

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	vgfont "gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// TrainingCurvesFile is the name of the training-curves PNG inside a run
// directory.
const TrainingCurvesFile = "training-curves.png"

// CurvesStrategy is the evaluation strategy whose EM the training curves
// show when the run has it (else the first strategy in eval.jsonl).
const CurvesStrategy = "search"

// Size of the training-curves PNG: 15 x 11.25 inches, 1440 x 1080 pixels
// at the PNG's 96 dpi.
const (
	curvesWidth  = 15 * vg.Inch
	curvesHeight = 11.25 * vg.Inch
)

// Panels of the training curves, in layout order.
const (
	panelEM = iota
	panelLegend
	panelReward
	panelFailed
	panelCritiques
	panelCritiqueLen
	panelOPDMean
	panelOPDTokens
	numPanels
)

// curvesLayout returns the rectangle of each panel (indexed by the panel
// constants) on a curvesWidth x curvesHeight canvas, and the y at which
// the figure's title is drawn. The top row is the evaluation EM with its
// legend beside it; below, two rows of three step panels.
func curvesLayout() (panels [numPanels]vg.Rectangle, titleY vg.Length) {
	const (
		margin = vg.Length(12)
		gap    = vg.Length(14)
		titleH = vg.Length(36)
	)
	top := curvesHeight - titleH
	titleY = curvesHeight - titleH + 10
	// The EM row takes 40% of the height below the title.
	avail := top - margin
	emH := 0.4*avail - gap/2
	rowH := (avail - emH - 2*gap) / 2
	width := curvesWidth - 2*margin
	legendW := 0.2 * width
	panels[panelEM] = vg.Rectangle{Min: vg.Point{X: margin, Y: top - emH}, Max: vg.Point{X: margin + width - legendW - gap, Y: top}}
	panels[panelLegend] = vg.Rectangle{Min: vg.Point{X: margin + width - legendW, Y: top - emH}, Max: vg.Point{X: margin + width, Y: top}}
	colW := (width - 2*gap) / 3
	for i := range 6 {
		row, col := i/3, i%3
		ymax := top - emH - gap - vg.Length(row)*(rowH+gap)
		xmin := margin + vg.Length(col)*(colW+gap)
		panels[panelReward+i] = vg.Rectangle{Min: vg.Point{X: xmin, Y: ymax - rowH}, Max: vg.Point{X: xmin + colW, Y: ymax}}
	}
	return panels, titleY
}

// WriteTrainingCurves renders the run's training curves (see
// PlotTrainingCurves) from its steps.jsonl and eval.jsonl into
// training-curves.png in the run directory, atomically. The orchestrator
// calls it after each evaluation; missing logs plot as "no data".
func WriteTrainingCurves(dir *RunDir) error {
	steps, err := dir.ReadSteps()
	if err != nil {
		return fmt.Errorf("training curves: %w", err)
	}
	evals, err := dir.ReadEval()
	if err != nil {
		return fmt.Errorf("training curves: %w", err)
	}
	return PlotTrainingCurves(filepath.Join(dir.Path, TrainingCurvesFile), filepath.Base(filepath.Clean(dir.Path)), steps, evals)
}

// PlotTrainingCurves writes a multi-panel PNG (1440 x 1080 pixels) to path,
// atomically, titled after the run name: on top, the evaluation EM (%) by
// step, average and per dataset, of strategy CurvesStrategy (or the first
// strategy of evals when there is none of it); below, from steps, the mean
// sampled reward, the share of failed trajectories, the critiques (and
// failed judge calls), the mean critique length, the mean OPD term over the
// tokens that have one, and the number of such tokens. Every panel shares
// the step axis. Values that a step did not record (no trajectories, no
// OPD tokens, no critique length) are left out; a panel with nothing to
// draw says "no data". A run with one step or no evaluations plots.
func PlotTrainingCurves(path, name string, steps []StepRecord, evals []EvalRecord) error {
	img, err := renderTrainingCurves(name, steps, evals)
	if err != nil {
		return fmt.Errorf("training curves: %w", err)
	}
	d := &RunDir{Path: filepath.Dir(path)}
	if err := d.WriteFileAtomic(filepath.Base(path), img); err != nil {
		return fmt.Errorf("training curves: %w", err)
	}
	return nil
}

// curve is one line of a panel.
type curve struct {
	label string
	pts   plotter.XYs
	color color.Color
	width vg.Length
	glyph draw.GlyphDrawer
}

// panel is one small plot: a title, a y label and its curves.
type panel struct {
	title, ylabel string
	curves        []curve
	// yMin is the floor of the y axis; yMax, when positive, a fixed top.
	yMin, yMax float64
	// legend draws a legend of the curves inside the panel.
	legend bool
	// integer marks counts: whole-number ticks on the y axis.
	integer bool
}

// renderTrainingCurves draws the figure and returns the PNG bytes.
func renderTrainingCurves(name string, steps []StepRecord, evals []EvalRecord) ([]byte, error) {
	steps = slices.Clone(steps)
	slices.SortStableFunc(steps, func(a, b StepRecord) int { return a.Step - b.Step })

	// The shared step axis spans every step and evaluation.
	var xs []int
	for _, s := range steps {
		xs = append(xs, s.Step)
	}
	for _, e := range evals {
		xs = append(xs, e.Step)
	}
	xMin, xMax := stepAxis(xs)

	em, strategy := emCurves(evals)
	stepPanels := stepCurves(steps)

	c := vgimg.New(curvesWidth, curvesHeight)
	dc := draw.New(c)
	rects, titleY := curvesLayout()

	title := "Training curves: " + name
	if slices.ContainsFunc(steps, func(s StepRecord) bool { return s.Simulated }) {
		title += " (SIMULATED: embedded simulator, not language models)"
	}
	ts := text.Style{Color: color.Black, Font: font(16), XAlign: draw.XCenter, Handler: plot.DefaultTextHandler}
	dc.FillText(ts, vg.Point{X: curvesWidth / 2, Y: titleY}, title)

	emTitle := "Evaluation EM (%)"
	if strategy != "" {
		emTitle += ", strategy " + strategy
	}
	emPanel := panel{title: emTitle, ylabel: "EM (%)", curves: em, yMin: 0}
	p, err := emPanel.plot(xMin, xMax)
	if err != nil {
		return nil, err
	}
	p.Draw(sub(dc, rects[panelEM]))
	drawLegend(sub(dc, rects[panelLegend]), em)

	for i, sp := range stepPanels {
		p, err := sp.plot(xMin, xMax)
		if err != nil {
			return nil, err
		}
		p.Draw(sub(dc, rects[panelReward+i]))
	}

	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// stepAxis is the range of a step axis over steps: from the least to the
// greatest with 3% padding each side, one step either side of a single
// step, [0, 1] for none.
func stepAxis(steps []int) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range steps {
		lo, hi = math.Min(lo, float64(s)), math.Max(hi, float64(s))
	}
	if math.IsInf(lo, 0) {
		lo, hi = 0, 1
	}
	if lo == hi {
		lo, hi = lo-1, hi+1
	}
	pad := 0.03 * (hi - lo)
	return lo - pad, hi + pad
}

// sub is the part r of canvas dc.
func sub(dc draw.Canvas, r vg.Rectangle) draw.Canvas {
	return draw.Canvas{Canvas: dc.Canvas, Rectangle: r}
}

// font is the default plot font at size points.
func font(size vg.Length) vgfont.Font {
	return vgfont.From(plot.DefaultFont, size)
}

// emCurves returns the average and per-dataset EM (%) curves of the
// strategy shown (CurvesStrategy, else the first in evals) and its name.
func emCurves(evals []EvalRecord) ([]curve, string) {
	if len(evals) == 0 {
		return nil, ""
	}
	strategy := evals[0].Strategy
	if slices.ContainsFunc(evals, func(e EvalRecord) bool { return e.Strategy == CurvesStrategy }) {
		strategy = CurvesStrategy
	}
	var rows []EvalRow
	for _, r := range Summarise(evals) {
		if r.Strategy == strategy {
			rows = append(rows, r)
		}
	}
	slices.SortStableFunc(rows, func(a, b EvalRow) int { return a.Step - b.Step })
	avg := curve{label: "average", color: color.Black, width: vg.Points(2.5), glyph: draw.CircleGlyph{}}
	byDataset := map[string]*curve{}
	for _, r := range rows {
		avg.pts = append(avg.pts, plotter.XY{X: float64(r.Step), Y: 100 * r.AvgEM})
		for ds, v := range r.EM {
			if byDataset[ds] == nil {
				byDataset[ds] = &curve{label: ds}
			}
			byDataset[ds].pts = append(byDataset[ds].pts, plotter.XY{X: float64(r.Step), Y: 100 * v})
		}
	}
	out := []curve{avg}
	for i, ds := range datasetOrder(byDataset) {
		c := byDataset[ds]
		c.label = datasetHeader(ds)
		c.color = plotColors[i%len(plotColors)]
		c.width = vg.Points(1.5)
		c.glyph = plotGlyphs[(i+1)%len(plotGlyphs)]
		out = append(out, *c)
	}
	return out, strategy
}

// datasetOrder lists dataset names in the canonical benchmark order, then
// the others sorted.
func datasetOrder[V any](m map[string]V) []string {
	var out, rest []string
	for _, c := range canonical {
		if _, ok := m[c.name]; ok {
			out = append(out, c.name)
		}
	}
	for ds := range m {
		if !slices.ContainsFunc(canonical, func(c struct{ name, header string }) bool { return c.name == ds }) {
			rest = append(rest, ds)
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}

// datasetHeader is a dataset's display name.
func datasetHeader(ds string) string {
	for _, c := range canonical {
		if c.name == ds {
			return c.header
		}
	}
	return ds
}

// stepCurves builds the six step panels from steps (sorted by step).
func stepCurves(steps []StepRecord) []panel {
	var reward, failed, critiques, critFails, critLen, opdMean, opdTokens plotter.XYs
	anyCritFail := false
	for _, s := range steps {
		x := float64(s.Step)
		if s.Trajectories > 0 {
			reward = append(reward, plotter.XY{X: x, Y: s.RewardMean})
			failed = append(failed, plotter.XY{X: x, Y: 100 * float64(s.Failed) / float64(s.Trajectories)})
		}
		critiques = append(critiques, plotter.XY{X: x, Y: float64(s.Critiques)})
		critFails = append(critFails, plotter.XY{X: x, Y: float64(s.CritiqueFailures)})
		anyCritFail = anyCritFail || s.CritiqueFailures > 0
		if s.CritiqueMeanChars > 0 {
			critLen = append(critLen, plotter.XY{X: x, Y: s.CritiqueMeanChars})
		}
		if s.OPDTokens > 0 {
			opdMean = append(opdMean, plotter.XY{X: x, Y: s.OPDMean})
		}
		opdTokens = append(opdTokens, plotter.XY{X: x, Y: float64(s.OPDTokens)})
	}
	one := func(title, ylabel string, pts plotter.XYs, i int) panel {
		p := panel{title: title, ylabel: ylabel, yMin: 0}
		if len(pts) > 0 {
			p.curves = []curve{{label: ylabel, pts: pts, color: plotColors[i], width: vg.Points(1.5), glyph: draw.CircleGlyph{}}}
		}
		return p
	}
	crit := one("Critiques per step", "critiques", critiques, 4)
	crit.integer = true
	if anyCritFail {
		crit.curves[0].label = "critiques used"
		crit.curves = append(crit.curves, curve{label: "judge failures", pts: critFails, color: plotColors[3], width: vg.Points(1.5), glyph: draw.CrossGlyph{}})
		crit.legend = true
	}
	opd := one("Mean OPD term (tokens with one)", "mean OPD term", opdMean, 2)
	opd.yMin = math.NaN() // the term may be negative (reverse_kl)
	failedPanel := one("Failed trajectories (%)", "failed (%)", failed, 3)
	failedPanel.yMax = 100
	tokens := one("Tokens with an OPD term", "tokens", opdTokens, 9)
	tokens.integer = true
	return []panel{
		one("Mean sampled reward", "reward", reward, 0),
		failedPanel,
		crit,
		one("Mean critique length (characters)", "characters", critLen, 5),
		opd,
		tokens,
	}
}

// plot builds the gonum plot of the panel over the step range [xMin, xMax].
func (pn panel) plot(xMin, xMax float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = pn.title
	p.Title.TextStyle.Font = font(12)
	p.Title.Padding = vg.Points(6)
	p.X.Label.Text = "training step"
	p.Y.Label.Text = pn.ylabel
	p.X.Label.TextStyle.Font = font(10)
	p.Y.Label.TextStyle.Font = font(10)
	p.X.Tick.Marker = niceTicks{integer: true}
	p.Y.Tick.Marker = niceTicks{integer: pn.integer}
	p.X.Min, p.X.Max = xMin, xMax

	if len(pn.curves) == 0 {
		p.Y.Min, p.Y.Max = 0, 1
		p.Y.Tick.Marker = plot.ConstantTicks{}
		lbl, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: (xMin + xMax) / 2, Y: 0.5}}, Labels: []string{"no data"}})
		if err != nil {
			return nil, err
		}
		lbl.TextStyle[0].Font = font(14)
		lbl.TextStyle[0].Color = color.Gray{Y: 0x80}
		lbl.TextStyle[0].XAlign = draw.XCenter
		lbl.TextStyle[0].YAlign = draw.YCenter
		p.Add(lbl)
		return p, nil
	}

	p.Add(plotter.NewGrid())
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, c := range pn.curves {
		for _, pt := range c.pts {
			lo, hi = math.Min(lo, pt.Y), math.Max(hi, pt.Y)
		}
	}
	for _, c := range pn.curves {
		line, points, err := plotter.NewLinePoints(c.pts)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", strings.ToLower(pn.title), err)
		}
		line.Color, line.Width = c.color, c.width
		points.Color, points.Shape, points.Radius = c.color, c.glyph, vg.Points(2.5)
		switch {
		case c.width == 0: // markers only
			p.Add(points)
		case len(c.pts) <= 40:
			p.Add(line, points)
		default:
			p.Add(line)
		}
		if pn.legend {
			p.Legend.Add(c.label, line, points)
		}
	}
	// The y range: from the floor (or the data) with head room above, so
	// that a flat line is not drawn on the frame and a legend has space.
	room := 1.1
	if pn.legend {
		room = 1.35
		p.Legend.Top, p.Legend.Left = true, true
		p.Legend.XOffs, p.Legend.YOffs = vg.Points(6), -vg.Points(4)
		p.Legend.TextStyle.Font = font(10)
	}
	if !math.IsNaN(pn.yMin) {
		lo = math.Min(lo, pn.yMin)
	}
	switch {
	case pn.yMax > 0:
		hi = pn.yMax
	case hi > lo:
		hi = lo + (hi-lo)*room
	default: // a flat line: centre it, or put it low with a floor
		span := math.Max(1, math.Abs(lo)) * 0.5
		if pn.integer {
			span = math.Max(span, 2)
		}
		hi = lo + span
		if math.IsNaN(pn.yMin) {
			lo -= span
		}
	}
	if math.IsNaN(pn.yMin) && lo < hi {
		lo -= 0.1 * (hi - lo)
	}
	p.Y.Min, p.Y.Max = lo, hi
	return p, nil
}

// drawLegend writes the legend of the EM curves in c, top left.
func drawLegend(c draw.Canvas, curves []curve) {
	if len(curves) == 0 {
		return
	}
	l := plot.NewLegend()
	l.Top, l.Left = true, true
	l.TextStyle.Font = font(11)
	l.ThumbnailWidth = vg.Points(28)
	l.Padding = vg.Points(4)
	for _, cv := range curves {
		line, points, err := plotter.NewLinePoints(cv.pts)
		if err != nil {
			continue // the curve failed to plot too, and said so
		}
		line.Color, line.Width = cv.color, cv.width
		points.Color, points.Shape, points.Radius = cv.color, cv.glyph, vg.Points(2.5)
		l.Add(cv.label, line, points)
	}
	// Leave room at the top for a heading level with the EM panel's title.
	c.Max.Y -= vg.Points(28)
	c.Min.X += vg.Points(6)
	l.Draw(c)
}
