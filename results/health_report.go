package results

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// HealthCurvesFile is the name of the health-curves PNG inside a run
// directory.
const HealthCurvesFile = "health-curves.png"

// HealthTable prints one row per step record with health to w, in the
// order given: searches per trajectory, answer, invalid-action,
// repeated-query and retrieval-error rates, the share of trajectories
// shown a gold answer ("-" in records from before it), the truncated
// share with each
// cause's, response and think tokens, the sampled entropy, the filtered
// trajectories and penalised turns and the collapse alarms; then, when the
// trainer reported any, a second table of the trainer's own metrics per
// step (every key any step has, as the backend named it). Records without
// health (written before it existed) are left out; none at all is an
// error.
func HealthTable(w io.Writer, recs []StepRecord) error {
	var keys []string
	var with []StepRecord
	for _, r := range recs {
		if r.Health == nil {
			continue
		}
		with = append(with, r)
		for k := range r.TrainerMetrics {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	if len(with) == 0 {
		return fmt.Errorf("health table: no step records with health (runs before the health object existed)")
	}
	slices.Sort(keys)
	t := newTable(w, 15)
	t.Header("step", "searches", "answer %", "invalid %", "repeat %", "retr err %", "gold retr %", "trunc %",
		"turn/ctx/limit/obs %", "after cut c/w/s/o %", "resp tok", "think tok", "entropy", "filtered", "penalised", "alarm")
	for _, r := range with {
		h := r.Health
		var causes []string
		for _, c := range TruncationCauses {
			causes = append(causes, fmt.Sprintf("%.0f", 100*h.Truncated[c]))
		}
		var alarms []string
		for _, a := range h.Alarms {
			alarms = append(alarms, fmt.Sprintf("%s -%.0f%% since %d", a.Metric, 100*a.Fall, a.PeakTo))
		}
		gold := "-"
		if v, ok := h.Value("gold_retrieved_rate"); ok {
			gold = pct(v)
		}
		if err := t.Append([]string{fmt.Sprint(r.Step), fmt.Sprintf("%.2f", h.SearchesPerTrajectory), pct(h.AnswerRate),
			pct(h.InvalidActionRate), pct(h.RepeatedQueryRate), pct(h.RetrievalErrorRate), gold, pct(h.TruncatedRate),
			strings.Join(causes, "/"), h.AfterCut.cells(), fmt.Sprintf("%.1f", h.ResponseTokens), fmt.Sprintf("%.1f", h.ThinkTokens),
			fmt.Sprintf("%.3f", h.SampledEntropy), fmt.Sprint(h.Filtered), fmt.Sprint(h.PenalisedTurns), strings.Join(alarms, "; ")}); err != nil {
			return fmt.Errorf("health table: %w", err)
		}
	}
	if err := t.Render(); err != nil {
		return fmt.Errorf("health table: %w", err)
	}
	if len(keys) == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(w, "the trainer's own metrics, as it reported them:"); err != nil {
		return fmt.Errorf("health table: %w", err)
	}
	t = newTable(w)
	t.Header(append([]any{"step"}, toAny(keys)...)...)
	for _, r := range with {
		cells := []string{fmt.Sprint(r.Step)}
		for _, k := range keys {
			if v, ok := r.TrainerMetrics[k]; ok {
				cells = append(cells, fmt.Sprintf("%.4g", v))
			} else {
				cells = append(cells, "-")
			}
		}
		if err := t.Append(cells); err != nil {
			return fmt.Errorf("health table: %w", err)
		}
	}
	if err := t.Render(); err != nil {
		return fmt.Errorf("health table: %w", err)
	}
	return nil
}

// Size of the health-curves PNG: 15 x 8.5 inches, 1440 x 816 pixels.
const (
	healthWidth  = 15 * vg.Inch
	healthHeight = 8.5 * vg.Inch
)

// PlotHealthCurves writes the health curves of steps to path (a PNG,
// atomically), titled after the run name: six panels over the step axis
// (searches per trajectory; answer rate and gold_retrieved_rate;
// invalid-action, repeated-query and retrieval-error rates; truncation by
// cause; response and think tokens; sampled entropy), a collapse alarm
// marked on its metric's panel by a red cross at each step it fired.
// Steps without health are left out; none at all draws "no data".
func PlotHealthCurves(path, name string, steps []StepRecord) error {
	img, err := renderHealthCurves(name, steps)
	if err != nil {
		return fmt.Errorf("health curves: %w", err)
	}
	d := &RunDir{Path: filepath.Dir(path)}
	if err := d.WriteFileAtomic(filepath.Base(path), img); err != nil {
		return fmt.Errorf("health curves: %w", err)
	}
	return nil
}

// WriteCurves draws both of a run directory's PNGs from one reading of
// its records: training-curves.png (PlotTrainingCurves, from steps.jsonl
// and eval.jsonl) and health-curves.png (PlotHealthCurves). An error of
// either is returned, the other drawn all the same.
func WriteCurves(dir *RunDir) error {
	steps, err := dir.ReadSteps()
	if err != nil {
		return fmt.Errorf("curves: %w", err)
	}
	evals, err := dir.ReadEval()
	if err != nil {
		return fmt.Errorf("curves: %w", err)
	}
	name := filepath.Base(filepath.Clean(dir.Path))
	return errors.Join(PlotTrainingCurves(filepath.Join(dir.Path, TrainingCurvesFile), name, steps, evals),
		PlotHealthCurves(filepath.Join(dir.Path, HealthCurvesFile), name, steps))
}

// healthPanels builds the six panels from steps (sorted by step).
func healthPanels(steps []StepRecord) []panel {
	series := map[string]plotter.XYs{}
	alarmed := map[string]plotter.XYs{}
	add := func(key string, x, y float64) { series[key] = append(series[key], plotter.XY{X: x, Y: y}) }
	for _, s := range steps {
		h := s.Health
		if h == nil {
			continue
		}
		x := float64(s.Step)
		for _, m := range HealthMetrics {
			v, ok := h.Value(m)
			if !ok {
				continue
			}
			if strings.HasSuffix(m, "_rate") {
				v *= 100
			}
			add(m, x, v)
		}
		for _, c := range TruncationCauses {
			add("trunc_"+c, x, 100*h.Truncated[c])
		}
		for _, a := range h.Alarms {
			v, _ := h.Value(a.Metric)
			if strings.HasSuffix(a.Metric, "_rate") {
				v *= 100
			}
			alarmed[a.Metric] = append(alarmed[a.Metric], plotter.XY{X: x, Y: v})
		}
	}
	keyOf := map[string]string{} // curve label -> health metric
	line := func(label, key string, i int, glyph draw.GlyphDrawer) curve {
		keyOf[label] = key
		return curve{label: label, pts: series[key], color: plotColors[i%len(plotColors)], width: vg.Points(1.5), glyph: glyph}
	}
	mk := func(title, ylabel string, legend bool, cs ...curve) panel {
		p := panel{title: title, ylabel: ylabel, yMin: 0, legend: legend}
		for _, c := range cs {
			if len(c.pts) > 0 {
				p.curves = append(p.curves, c)
			}
		}
		for _, c := range cs {
			if m := keyOf[c.label]; len(alarmed[m]) > 0 {
				p.curves = append(p.curves, curve{label: "alarm: " + strings.ReplaceAll(m, "_", " "), pts: alarmed[m],
					color: color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, width: 0, glyph: draw.CrossGlyph{}})
				p.legend = true
			}
		}
		return p
	}
	answer := mk("Answered; gold answer retrieved (%)", "trajectories (%)", true, line("answered", "answer_rate", 1, draw.CircleGlyph{}),
		line("gold answer in the passages", "gold_retrieved_rate", 2, draw.BoxGlyph{}))
	answer.yMax = 125 // rates up to 100%, room above for the legend
	return []panel{
		mk("Searches per trajectory", "searches", false, line("searches", "searches_per_trajectory", 0, draw.CircleGlyph{})),
		answer,
		mk("Invalid, repeated and failed (%)", "rate (%)", true,
			line("invalid actions (of turns)", "invalid_action_rate", 3, draw.CircleGlyph{}),
			line("repeated queries (of searches)", "repeated_query_rate", 4, draw.BoxGlyph{}),
			line("retrieval errors (of searches)", "retrieval_error_rate", 5, draw.TriangleGlyph{})),
		mk("Truncated trajectories by cause (%)", "trajectories (%)", true,
			line("any", "truncated_rate", 7, draw.CircleGlyph{}),
			line("turn tokens", "trunc_"+TruncTurnTokens, 0, draw.BoxGlyph{}),
			line("context", "trunc_"+TruncContext, 1, draw.TriangleGlyph{}),
			line("turn limit", "trunc_"+TruncTurnLimit, 2, draw.PyramidGlyph{}),
			line("observation cut", "trunc_"+TruncObservation, 6, draw.RingGlyph{})),
		mk("Tokens per trajectory", "tokens", true,
			line("written by the policy", "response_tokens", 0, draw.CircleGlyph{}),
			line("inside <think>", "think_tokens", 2, draw.BoxGlyph{})),
		mk("Sampled entropy (mean -logprob)", "nats per token", false, line("entropy", "sampled_entropy", 8, draw.CircleGlyph{})),
	}
}

// renderHealthCurves draws the figure and returns the PNG bytes.
func renderHealthCurves(name string, steps []StepRecord) ([]byte, error) {
	steps = slices.Clone(steps)
	slices.SortStableFunc(steps, func(a, b StepRecord) int { return a.Step - b.Step })
	var xs []int
	for _, s := range steps {
		if s.Health != nil {
			xs = append(xs, s.Step)
		}
	}
	xMin, xMax := stepAxis(xs)

	c := vgimg.New(healthWidth, healthHeight)
	dc := draw.New(c)
	const (
		margin = vg.Length(12)
		gap    = vg.Length(14)
		titleH = vg.Length(36)
	)
	title := "Search-agent health: " + name
	if slices.ContainsFunc(steps, func(s StepRecord) bool { return s.Simulated }) {
		title += " (SIMULATED: embedded simulator, not language models)"
	}
	ts := text.Style{Color: color.Black, Font: font(16), XAlign: draw.XCenter, Handler: plot.DefaultTextHandler}
	dc.FillText(ts, vg.Point{X: healthWidth / 2, Y: healthHeight - titleH + 10}, title)
	top := healthHeight - titleH
	rowH := (top - margin - gap) / 2
	colW := (healthWidth - 2*margin - 2*gap) / 3
	for i, pn := range healthPanels(steps) {
		row, col := i/3, i%3
		ymax := top - vg.Length(row)*(rowH+gap)
		xmin := margin + vg.Length(col)*(colW+gap)
		p, err := pn.plot(xMin, xMax)
		if err != nil {
			return nil, err
		}
		p.Draw(sub(dc, vg.Rectangle{Min: vg.Point{X: xmin, Y: ymax - rowH}, Max: vg.Point{X: xmin + colW, Y: ymax}}))
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
