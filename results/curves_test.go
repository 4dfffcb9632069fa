package results

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg"
)

// curvesSteps returns n step records with every plotted field set.
func curvesSteps(n int) []StepRecord {
	var out []StepRecord
	for i := 1; i <= n; i++ {
		out = append(out, StepRecord{Step: i, RewardMean: 0.1 * float64(i), Trajectories: 40, Failed: 40 - 4*i,
			Critiques: 30 - i, CritiqueFailures: i % 2, CritiqueMeanChars: 100 + 5*float64(i),
			OPDTokens: 10 * i, OPDMean: 0.5 - 0.05*float64(i), Simulated: true})
	}
	return out
}

func curvesEvals() []EvalRecord {
	var out []EvalRecord
	for _, step := range []int{0, 2, 4} {
		for i, ds := range []string{"nq", "hotpotqa", "custom"} {
			out = append(out,
				EvalRecord{Step: step, Strategy: "search", Dataset: ds, N: 50, EM: 0.05*float64(step) + 0.1*float64(i)},
				EvalRecord{Step: step, Strategy: "direct", Dataset: ds, N: 50, EM: 0.9})
		}
	}
	return out
}

// decodePNG reads the PNG at path and checks its size.
func decodePNG(t *testing.T, path string) image.Image {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if s := img.Bounds().Size(); s.X != 1440 || s.Y != 1080 {
		t.Fatalf("%s is %v, want 1440x1080", path, s)
	}
	return img
}

// pixelRect converts a layout rectangle (points, origin bottom left) to
// image pixels (96 dpi, origin top left).
func pixelRect(img image.Image, r vg.Rectangle) image.Rectangle {
	px := func(l vg.Length) int { return int(float64(l) / 72 * 96) }
	h := img.Bounds().Dy()
	return image.Rect(px(r.Min.X), h-px(r.Max.Y), px(r.Max.X), h-px(r.Min.Y)).Intersect(img.Bounds())
}

// count returns how many pixels of rect match pred.
func count(img image.Image, rect image.Rectangle, pred func(r, g, b uint8) bool) int {
	n := 0
	for y := rect.Min.Y; y < rect.Max.Y; y++ {
		for x := rect.Min.X; x < rect.Max.X; x++ {
			c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
			if pred(c.R, c.G, c.B) {
				n++
			}
		}
	}
	return n
}

func notWhite(r, g, b uint8) bool { return r < 250 || g < 250 || b < 250 }

// near matches pixels within a few levels of c (line centres and glyphs
// are drawn in the exact colour; their edges are blended).
func near(c color.Color) func(r, g, b uint8) bool {
	want := color.RGBAModel.Convert(c).(color.RGBA)
	d := func(a, b uint8) int { return max(int(a)-int(b), int(b)-int(a)) }
	return func(r, g, b uint8) bool { return d(r, want.R) < 12 && d(g, want.G) < 12 && d(b, want.B) < 12 }
}

func TestPlotTrainingCurves(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "curves.png")
	if err := PlotTrainingCurves(path, "demo", curvesSteps(5), curvesEvals()); err != nil {
		t.Fatal(err)
	}
	img := decodePNG(t, path)
	rects, _ := curvesLayout()
	for i, r := range rects {
		if n := count(img, pixelRect(img, r), notWhite); n < 500 {
			t.Errorf("panel %d has %d drawn pixels", i, n)
		}
	}
	// Each panel shows its curve in its colour: the EM panel the datasets'
	// (first, second and third colour), the step panels theirs.
	for _, c := range []struct {
		panel int
		color color.Color
	}{
		{panelEM, plotColors[0]}, {panelEM, plotColors[1]}, {panelEM, plotColors[2]},
		{panelLegend, plotColors[2]},
		{panelReward, plotColors[0]}, {panelFailed, plotColors[3]},
		{panelCritiques, plotColors[4]}, {panelCritiques, plotColors[3]},
		{panelCritiqueLen, plotColors[5]}, {panelOPDMean, plotColors[2]}, {panelOPDTokens, plotColors[9]},
	} {
		if n := count(img, pixelRect(img, rects[c.panel]), near(c.color)); n < 20 {
			t.Errorf("panel %d has %d pixels of colour %v", c.panel, n, c.color)
		}
	}
	// No temporary file is left beside it.
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want the PNG only", len(entries))
	}
}

func TestPlotTrainingCurvesOneStepNoEval(t *testing.T) {
	path := filepath.Join(t.TempDir(), "curves.png")
	steps := []StepRecord{{Step: 1, RewardMean: 0.2, Trajectories: 10, Failed: 8, Critiques: 8}}
	if err := PlotTrainingCurves(path, "one", steps, nil); err != nil {
		t.Fatal(err)
	}
	img := decodePNG(t, path)
	rects, _ := curvesLayout()
	for _, i := range []int{panelEM, panelReward, panelFailed, panelCritiques, panelCritiqueLen, panelOPDMean, panelOPDTokens} {
		if n := count(img, pixelRect(img, rects[i]), notWhite); n < 500 {
			t.Errorf("panel %d has %d drawn pixels", i, n)
		}
	}
	// The single step is drawn as a point; the panels without data
	// (evaluations, critique length, the OPD mean of no tokens) have no
	// curve colour.
	if n := count(img, pixelRect(img, rects[panelReward]), near(plotColors[0])); n < 10 {
		t.Errorf("reward panel has %d pixels of its colour", n)
	}
	for _, c := range []struct {
		panel int
		color color.Color
	}{{panelEM, plotColors[0]}, {panelCritiqueLen, plotColors[5]}, {panelOPDMean, plotColors[2]}} {
		if n := count(img, pixelRect(img, rects[c.panel]), near(c.color)); n > 0 {
			t.Errorf("no-data panel %d has %d pixels of colour %v", c.panel, n, c.color)
		}
	}
	if n := count(img, pixelRect(img, rects[panelLegend]), notWhite); n > 0 {
		t.Errorf("legend panel drawn without evaluations (%d pixels)", n)
	}
}

func TestPlotTrainingCurvesEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "curves.png")
	if err := PlotTrainingCurves(path, "empty", nil, nil); err != nil {
		t.Fatal(err)
	}
	decodePNG(t, path)
}

func TestWriteTrainingCurves(t *testing.T) {
	d, err := Create(filepath.Join(t.TempDir(), "run"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range curvesSteps(3) {
		if err := d.AppendJSONL(StepsFile, s); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range curvesEvals() {
		if err := d.AppendJSONL(EvalFile, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteTrainingCurves(d); err != nil {
		t.Fatal(err)
	}
	decodePNG(t, filepath.Join(d.Path, TrainingCurvesFile))

	// A bad log line is reported with its file and line.
	if err := os.WriteFile(filepath.Join(d.Path, StepsFile), []byte("{\"step\":1}\n{bad\n{\"step\":3}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = WriteTrainingCurves(d)
	if err == nil || !strings.Contains(err.Error(), StepsFile+":2") {
		t.Errorf("bad steps.jsonl: %v", err)
	}
}

func TestEMCurvesStrategy(t *testing.T) {
	curves, strategy := emCurves(curvesEvals())
	if strategy != CurvesStrategy {
		t.Fatalf("strategy %q, want %q", strategy, CurvesStrategy)
	}
	var labels []string
	for _, c := range curves {
		labels = append(labels, c.label)
	}
	if got := strings.Join(labels, ","); got != "average,NQ,HotpotQA,custom" {
		t.Errorf("curves %s", got)
	}
	// Average of 0.2, 0.3, 0.4 at step 4, in percent.
	if pts := curves[0].pts; len(pts) != 3 || pts[2].X != 4 || pts[2].Y < 29.99 || pts[2].Y > 30.01 {
		t.Errorf("average %v", pts)
	}
	// Without search records, the first strategy is shown.
	_, strategy = emCurves([]EvalRecord{{Step: 0, Strategy: "direct", Dataset: "nq", EM: 0.5}})
	if strategy != "direct" {
		t.Errorf("strategy %q, want direct", strategy)
	}
}
