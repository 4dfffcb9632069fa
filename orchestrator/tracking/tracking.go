// Package tracking feeds a run's records to the experiment trackers its
// recipe names (tracking.*): TensorBoard event files, a Weights & Biases
// offline run, an MLflow server. Each tracker has a worker of its own that
// takes the run's steps in order in the background: a tracker that fails
// never stops or slows training; it is retried with a backoff, warned of
// once, counted, and what it has not taken when the run ends is said (the
// run directory holds all of it either way). docs/watching.md, "Trackers".
package tracking

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hindsearch/hindsearch/clients/tracker/mlflow"
	"github.com/hindsearch/hindsearch/clients/tracker/wandb"
	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/results"
)

// IDs are the trackers' run ids a resumed run continues (state.json).
type IDs struct {
	// WandB is the W&B run id.
	WandB string `json:"wandb,omitempty"`
	// MLflow is the MLflow run id and MLflowExperiment its experiment's.
	MLflow           string `json:"mlflow,omitempty"`
	MLflowExperiment string `json:"mlflow_experiment,omitempty"`
}

// Step is one point of the run's curves: a training step's scalars (and
// its evaluation's, if it had one), or step 0's evaluation of the base
// weights.
type Step struct {
	Step    int
	At      time.Time
	Scalars map[string]float64
}

// sink is one tracker, driven by its worker: open until it succeeds, then
// steps in order, artifacts, and finish once.
type sink interface {
	// name names the tracker in warnings ("mlflow http://host:5000").
	name() string
	open(ctx context.Context) error
	step(ctx context.Context, s Step) error
	files(ctx context.Context, files map[string][]byte) error
	finish(ctx context.Context, ok bool) error
	// where says where the tracker's run is, for the run's last lines.
	where() string
}

// item is a worker's unit of work.
type item struct {
	step  *Step
	files map[string][]byte
	end   *bool // finish, with the run's outcome
}

// worker runs one sink in the background.
type worker struct {
	s       sink
	mu      sync.Mutex
	queue   []item
	opened  bool
	wake    chan struct{}
	done    chan struct{}
	warned  bool
	lastErr error
	sent    int // steps taken
	out     io.Writer
	outMu   *sync.Mutex
	onFail  func(tracker string)
}

// Hub is a run's trackers.
type Hub struct {
	workers []*worker
	cancel  context.CancelFunc
	ids     func() IDs
	outMu   sync.Mutex
}

// Backoff bounds between a failed call and the next try.
var (
	backoffMin = time.Second
	backoffMax = time.Minute
)

// start starts a worker per sink.
func start(sinks []sink, ids func() IDs, out io.Writer, onFail func(string)) *Hub {
	ctx, cancel := context.WithCancel(context.Background())
	h := &Hub{cancel: cancel, ids: ids}
	for _, s := range sinks {
		w := &worker{s: s, wake: make(chan struct{}, 1), done: make(chan struct{}), out: out, outMu: &h.outMu, onFail: onFail}
		h.workers = append(h.workers, w)
		go w.run(ctx)
	}
	return h
}

// Enabled reports whether the hub has any tracker (a nil hub has none).
func (h *Hub) Enabled() bool { return h != nil && len(h.workers) > 0 }

// IDs are the trackers' run ids so far (for state.json).
func (h *Hub) IDs() IDs {
	if h == nil || h.ids == nil {
		return IDs{}
	}
	return h.ids()
}

// Step queues a step for every tracker; it never blocks on one.
func (h *Hub) Step(s Step) {
	if h == nil {
		return
	}
	for _, w := range h.workers {
		w.push(item{step: &s})
	}
}

// Files queues artifacts (name to content) for the trackers that keep
// files (MLflow); a later file of the same name replaces the earlier on
// the tracker.
func (h *Hub) Files(files map[string][]byte) {
	if h == nil || len(files) == 0 {
		return
	}
	for _, w := range h.workers {
		w.push(item{files: files})
	}
}

// Close ends every tracker's run (ok: the run finished; otherwise it
// failed or was stopped) and waits up to flush for the trackers to take
// what they have queued, then stops them. It returns one line per tracker
// saying where its run is or what it did not take.
func (h *Hub) Close(ok bool, flush time.Duration) []string {
	if h == nil {
		return nil
	}
	for _, w := range h.workers {
		w.push(item{end: &ok})
	}
	deadline := time.After(flush)
	for _, w := range h.workers {
		select {
		case <-w.done:
		case <-deadline:
		}
	}
	h.cancel()
	var lines []string
	for _, w := range h.workers {
		<-w.done
		w.mu.Lock()
		left, sent := 0, w.sent
		for _, it := range w.queue {
			if it.step != nil {
				left++
			}
		}
		pending, err := len(w.queue), w.lastErr
		w.mu.Unlock()
		// A tracker still on a call when flush ran out has no error.
		why := "still working when tracking.flush_seconds ran out"
		if err != nil {
			why = "the last error: " + shortErr(err)
		}
		switch {
		case pending == 0:
			lines = append(lines, fmt.Sprintf("tracking: %s: %d steps; %s", w.s.name(), sent, w.s.where()))
		default:
			lines = append(lines, fmt.Sprintf("tracking: %s: %d steps taken, %d not (%s); steps.jsonl and eval.jsonl hold them: `orchestrate track RUN_DIR` sends the run again later",
				w.s.name(), sent, left, why))
		}
	}
	return lines
}

// push queues it and wakes the worker.
func (w *worker) push(it item) {
	w.mu.Lock()
	if it.files != nil {
		cp := make(map[string][]byte, len(it.files))
		for k, v := range it.files {
			cp[k] = v
		}
		it.files = cp
	}
	w.queue = append(w.queue, it)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run takes the queue in order until the hub's context ends or the
// finish item is done.
func (w *worker) run(ctx context.Context) {
	defer close(w.done)
	wait := backoffMin
	for {
		w.mu.Lock()
		var it *item
		if len(w.queue) > 0 {
			it = &w.queue[0]
		}
		w.mu.Unlock()
		if it == nil {
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
				continue
			}
		}
		err := w.apply(ctx, *it)
		if err == nil {
			w.mu.Lock()
			if it.step != nil {
				w.sent++
			}
			w.queue = w.queue[1:]
			w.lastErr = nil
			end := it.end != nil
			w.mu.Unlock()
			wait = backoffMin
			if end {
				return
			}
			continue
		}
		if ctx.Err() != nil {
			return
		}
		w.failed(err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, backoffMax)
	}
}

// apply does one item (opening the sink first).
func (w *worker) apply(ctx context.Context, it item) error {
	if !w.opened {
		if err := w.s.open(ctx); err != nil {
			return err
		}
		w.opened = true
	}
	switch {
	case it.step != nil:
		return w.s.step(ctx, *it.step)
	case it.files != nil:
		return w.s.files(ctx, it.files)
	default:
		return w.s.finish(ctx, *it.end)
	}
}

// failed counts a failure and warns of the first.
func (w *worker) failed(err error) {
	w.mu.Lock()
	w.lastErr = err
	first := !w.warned
	w.warned = true
	w.mu.Unlock()
	if w.onFail != nil {
		w.onFail(w.s.name())
	}
	if first {
		w.outMu.Lock()
		fmt.Fprintf(w.out, "warning: tracking: %s: %v; retrying in the background (training goes on; the run directory has every record)\n", w.s.name(), err)
		w.outMu.Unlock()
	}
}

// Scalars flattens a step record's numbers (every numeric field, nested
// ones as path/parts: phase_seconds/rollout, health/truncated/context,
// trainer_metrics/optim_step/grad_norm) and its evaluation's EM and F1
// (eval/<strategy>/<dataset>/em|f1, and eval/<strategy>/avg/em|f1, the
// question-weighted mean) into tracker keys.
func Scalars(rec *results.StepRecord, evals []results.EvalRecord) map[string]float64 {
	out := map[string]float64{}
	if rec != nil {
		b, _ := json.Marshal(rec)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		delete(m, "step")
		flattenNumbers("", m, out)
	}
	for _, row := range results.Summarise(evals) {
		for ds, em := range row.EM {
			out[Key("eval/"+row.Strategy+"/"+ds+"/em")] = em
		}
		for ds, f1 := range row.F1 {
			out[Key("eval/"+row.Strategy+"/"+ds+"/f1")] = f1
		}
		out[Key("eval/"+row.Strategy+"/avg/em")] = row.AvgEM
		out[Key("eval/"+row.Strategy+"/avg/f1")] = row.AvgF1
	}
	return out
}

// flattenNumbers puts v's numbers into out under prefix/key paths.
func flattenNumbers(prefix string, v any, out map[string]float64) {
	switch x := v.(type) {
	case float64:
		if !math.IsNaN(x) && !math.IsInf(x, 0) && prefix != "" {
			out[Key(prefix)] = x
		}
	case map[string]any:
		for k, e := range x {
			p := k
			if prefix != "" {
				p = prefix + "/" + k
			}
			flattenNumbers(p, e, out)
		}
	case []any:
		// Lists (health alarms) are flags: 1 per alarm's metric.
		for _, e := range x {
			if m, ok := e.(map[string]any); ok {
				if name, ok := m["metric"].(string); ok {
					out[Key(prefix+"/"+name)] = 1
				}
			}
		}
	}
}

// reKeyUnsafe matches what MLflow does not allow in a metric or param key
// (letters, digits, _ - . / and space are allowed); every tracker gets the
// same key.
var reKeyUnsafe = regexp.MustCompile(`[^A-Za-z0-9_\-./ ]`)

// Key makes a tracker key of s: characters MLflow refuses become '_'.
func Key(s string) string { return reKeyUnsafe.ReplaceAllString(s, "_") }

// RunConfig flattens a recipe's YAML into dotted keys with typed values
// (numbers, booleans, strings, lists as lists; variants kept whole): W&B's
// run config.
func RunConfig(y []byte) (map[string]any, error) {
	var m map[string]any
	if err := yamlUnmarshal(y, &m); err != nil {
		return nil, fmt.Errorf("recipe config: %w", err)
	}
	out := map[string]any{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if mm, ok := v.(map[string]any); ok && len(mm) > 0 && prefix != "variants" {
			for k, e := range mm {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				walk(p, e)
			}
			return
		}
		out[Key(prefix)] = v
	}
	walk("", m)
	return out, nil
}

// Params is RunConfig as MLflow's string params (lists and maps as JSON,
// null as ""), sorted by key.
func Params(y []byte) ([][2]string, error) {
	cfg, err := RunConfig(y)
	if err != nil {
		return nil, err
	}
	out := make([][2]string, 0, len(cfg))
	for k, v := range cfg {
		var s string
		switch x := v.(type) {
		case string:
			s = x
		case nil:
		case []any, map[string]any:
			b, _ := json.Marshal(x)
			s = string(b)
		default:
			s = fmt.Sprint(x)
		}
		out = append(out, [2]string{k, s})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out, nil
}

// NewRunID is a W&B-style run id: 8 characters of [a-z0-9].
func NewRunID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// shortErr is err's text cut to one line.
func shortErr(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// Config is what New needs of a run.
type Config struct {
	// Recipe is the run's recipe (its tracking.* keys).
	Recipe *recipes.Recipe
	// RunDir is the run directory (TensorBoard's files go under it, and
	// W&B's unless tracking.wandb.dir says otherwise).
	RunDir string
	// RecipeYAML is the recipe as saved (secrets redacted): TensorBoard's
	// text, W&B's config, MLflow's params.
	RecipeYAML []byte
	// ResumeAfter is the step a resumed run continues after (-1: a new
	// run); IDs are the trackers' ids it continues.
	ResumeAfter int
	IDs         IDs
	// Simulated marks a run on the simulator (a tag, and W&B's notes).
	Simulated bool
	// MLflow is the MLflow server's client (nil: no MLflow tracker).
	MLflow mlflow.Tracker
	// Out receives the trackers' warnings.
	Out io.Writer
	// OnFail, when set, is told of every failed tracker call (metrics).
	OnFail func(tracker string)
	// Start is when the run began.
	Start time.Time
	// Replay sends a finished run's records again as new tracker runs
	// (Replay): TensorBoard's new file starts with a SessionLog START at
	// step 0, which drops what older files of the directory hold.
	Replay bool
}

// New starts the trackers c.Recipe names (nil when it names none).
func New(c Config) (*Hub, error) {
	t := c.Recipe.Tracking
	var sinks []sink
	ids := c.IDs
	if t.TensorBoard {
		tb := &tbSink{dir: filepath.Join(c.RunDir, "tensorboard"), restartAt: -1, recipe: string(c.RecipeYAML)}
		switch {
		case c.ResumeAfter >= 0:
			tb.restartAt, tb.recipe = c.ResumeAfter+1, ""
		case c.Replay:
			tb.restartAt = 0
		}
		sinks = append(sinks, tb)
	}
	params, err := Params(c.RecipeYAML)
	if err != nil {
		return nil, err
	}
	notes := ""
	if c.Simulated {
		notes = "SIMULATED: the embedded hindsearch simulator, not language models"
	}
	if t.WandB.Project != "" {
		if ids.WandB == "" || c.ResumeAfter < 0 {
			ids.WandB = NewRunID()
		}
		root := t.WandB.Dir
		if root == "" {
			root = c.RunDir
		}
		cfg, err := RunConfig(c.RecipeYAML)
		if err != nil {
			return nil, err
		}
		name := cmp.Or(t.WandB.Name, c.Recipe.Name)
		sinks = append(sinks, &wandbSink{root: root, resumeAfter: c.ResumeAfter, run: wandb.Run{ID: ids.WandB, Project: t.WandB.Project,
			Entity: t.WandB.Entity, Name: name, Config: cfg, Start: c.Start, Notes: notes, Tags: []string{"hindsearch"}}})
	}
	var ml *mlflowSink
	if c.MLflow != nil {
		tags := []mlflow.Tag{{Key: "mlflow.source.name", Value: "hindsearch"}, {Key: "hindsearch.recipe", Value: c.Recipe.Name},
			{Key: "hindsearch.simulated", Value: fmt.Sprint(c.Simulated)}}
		if notes != "" {
			tags = append(tags, mlflow.Tag{Key: "mlflow.note.content", Value: notes})
		}
		ml = &mlflowSink{c: c.MLflow, experiment: cmp.Or(t.MLflow.Experiment, c.Recipe.Name), runName: c.Recipe.Name,
			params: params, tags: tags, start: c.Start, resumeAfter: c.ResumeAfter, skipThrough: -1, probeKey: "reward_mean"}
		if c.ResumeAfter >= 0 {
			ml.expID, ml.runID = ids.MLflowExperiment, ids.MLflow
		}
		sinks = append(sinks, ml)
	}
	if len(sinks) == 0 {
		return nil, nil
	}
	wandbID := ids.WandB
	return start(sinks, func() IDs {
		out := IDs{WandB: wandbID}
		if ml != nil {
			out.MLflowExperiment, out.MLflow = ml.ids()
		}
		return out
	}, c.Out, c.OnFail), nil
}

// RunFiles are the run directory's files a tracker that keeps artifacts
// (MLflow) is given: the curves, the recipe and the records.
func RunFiles(dir string) map[string][]byte {
	return readFiles(dir, results.TrainingCurvesFile, results.HealthCurvesFile, "recipe.yaml", results.StepsFile, results.EvalFile)
}

// FinalFiles are RunFiles with the table of evals under caption
// (results.txt) when there are any: what a finished run leaves.
func FinalFiles(dir string, evals []results.EvalRecord, caption string) map[string][]byte {
	files := RunFiles(dir)
	if len(evals) > 0 {
		var b bytes.Buffer
		if results.EvalTable(&b, evals, caption) == nil {
			files["results.txt"] = b.Bytes()
		}
	}
	return files
}

// Replay sends a run directory's records (its steps, their evaluations,
// step 0's evaluation, the files) to c's trackers as new runs and waits
// up to flush for them; it returns the trackers' closing lines. For runs
// whose trackers were off or failed: `orchestrate track`.
func Replay(c Config, steps []results.StepRecord, evals []results.EvalRecord, files map[string][]byte, flush time.Duration) ([]string, error) {
	c.Replay, c.ResumeAfter, c.IDs = true, -1, IDs{}
	h, err := New(c)
	if err != nil {
		return nil, err
	}
	if h == nil {
		return nil, fmt.Errorf("no tracker: set tracking.tensorboard, tracking.wandb.project or tracking.mlflow.tracking_uri")
	}
	byStep := map[int][]results.EvalRecord{}
	for _, e := range evals {
		byStep[e.Step] = append(byStep[e.Step], e)
	}
	at := c.Start
	if ev := byStep[0]; len(ev) > 0 {
		h.Step(Step{Step: 0, At: at, Scalars: Scalars(nil, ev)})
	}
	for i := range steps {
		s := &steps[i]
		at = at.Add(time.Duration(s.WallSeconds * float64(time.Second)))
		h.Step(Step{Step: s.Step, At: at, Scalars: Scalars(s, byStep[s.Step])})
	}
	h.Files(files)
	return h.Close(true, flush), nil
}
