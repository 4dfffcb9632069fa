// Package orchestrator is the HindSearch training loop: it draws questions,
// rolls out Search-R1 trajectories against the policy servers and the
// retriever, scores them, asks the judge to critique failed ones, scores
// their tokens under the hinted teacher context, streams weighted datums to
// the trainer, syncs the new weights to the policy servers and evaluates.
package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/template"
	"time"
	"unicode/utf8"

	"github.com/sourcegraph/conc/pool"

	"github.com/hindsearch/hindsearch/clients/judge"
	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/orchestrator/dataset"
	"github.com/hindsearch/hindsearch/orchestrator/doctor"
	"github.com/hindsearch/hindsearch/orchestrator/metrics"
	"github.com/hindsearch/hindsearch/orchestrator/progress"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/results"
)

// Runner runs one recipe.
type Runner struct {
	// Recipe is the resolved, validated recipe.
	Recipe *recipes.Recipe
	// Deps are the role clients.
	Deps roles.Deps
	// Out receives progress lines and the final table.
	Out io.Writer
	// Overwrite lets a run replace the results of an earlier run in the
	// same output directory.
	Overwrite bool
	// Resume continues the run in the output directory from its last
	// completed step (state.json): records past it are dropped, the trainer
	// state and the adapters are restored, and the same data order and seeds
	// make the same batches as an uninterrupted run.
	Resume bool
	// Metrics, when set, receives the run's Prometheus metrics (the
	// transport's request metrics are wired by Connect's WithMetrics).
	Metrics *metrics.Metrics
	// Progress, when set, shows the rollouts' and evaluations' progress;
	// Out should then be its Writer, so lines appear above live bars.
	Progress *progress.Reporter

	// advantageSign multiplies every GRPO advantage (tests flip it to -1 to
	// check that the learning signal has the right sign).
	advantageSign float64
	// last is the run's live state once Run returns (for the benchmark's
	// counters).
	last *run
	// afterStep, when set (tests), runs after each recorded step.
	afterStep func(step int)
}

// Summary is what a finished run reports.
type Summary struct {
	// Dir is the run directory.
	Dir string
	// Evals are the evaluation records, in order.
	Evals []results.EvalRecord
	// Steps are the step records, in order.
	Steps []results.StepRecord
}

// state is the run's resume point (state.json).
type state struct {
	Step      int    `json:"step"`
	Adapter   string `json:"adapter"`
	ModelID   string `json:"model_id"`
	Cursor    int    `json:"cursor"`
	Simulated bool   `json:"simulated"`
	Updated   string `json:"updated"`
	// TrainerState is the trainer's saved full state (save_weights) after
	// Step, from which a resumed run continues.
	TrainerState string `json:"trainer_state"`
	// Adapters maps a step to the adapter carrying its weights, and
	// Samplers an adapter to its sampler path, for the adapters a resumed
	// run must serve again.
	Adapters map[int]string    `json:"adapters"`
	Samplers map[string]string `json:"samplers"`
}

// run holds one run's live state.
type run struct {
	*Runner
	r       *recipes.Recipe
	dir     *results.RunDir
	train   []dataset.Question
	evalSet map[string][]dataset.Question
	roller  *roller
	hinter  *hinter
	ev      *evaluator
	sync    weightSync
	modelID string
	adapter string // policy model name currently served ("" = base)
	cursor  int
	sim     bool
	// excluded counts the training questions train.exclude_eval dropped.
	excluded int

	mu       sync.Mutex
	adapters map[int]string // step -> adapter name carrying its weights
	// judgeSem bounds the judge requests in flight (judge.concurrency).
	judgeSem semaphore
	// syncMu serialises weight syncs and replica re-admissions.
	syncMu sync.Mutex
	// trainer is Deps.Trainer with trainer.call_timeout_seconds on every
	// call.
	trainer trainer.Trainer
	// samplers maps adapter names to sampler paths; resumed is the state a
	// resumed run continues from (nil: a new run).
	samplers map[string]string
	resumed  *state
	// prior is the model id trainer_model.json named when the run began:
	// the model of the run this directory held before.
	prior string
	// ret bounds the trainer's disk (checkpoint.keep); lastState is the
	// newest state.json written or resumed from, lastStep the newest
	// finished step (both guarded by mu).
	ret       *retention
	lastState *state
	lastStep  int
	// lastTrajs and lastStart are the last finished step's trajectories and
	// start time (for the benchmark).
	lastTrajs []*Trajectory
	lastStart time.Time
}

var reUnsafe = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// Run executes the recipe: an evaluation before training, the training
// steps with evaluations every eval.every steps and after the last, and the
// final table printed to Out.
func (rn *Runner) Run(ctx context.Context) (*Summary, error) {
	if rn.advantageSign == 0 {
		rn.advantageSign = 1
	}
	if rn.Out == nil {
		rn.Out = io.Discard
	}
	r := rn.Recipe
	if _, err := rn.Deps.LocalTokenizer(); err != nil {
		return nil, err
	}
	dir, lock, err := openRunDir(r.Output.Dir)
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	var resumed *state
	if rn.Resume {
		if resumed, err = readState(dir); err != nil {
			return nil, err
		}
	} else if err := rn.claim(dir); err != nil {
		return nil, err
	}
	red := r.Redacted()
	y, err := red.YAML()
	if err != nil {
		return nil, fmt.Errorf("save recipe: %w", err)
	}
	if err := dir.WriteFileAtomic("recipe.yaml", y); err != nil {
		return nil, fmt.Errorf("save recipe: %w", err)
	}
	ru := &run{Runner: rn, r: r, dir: dir, sim: len(rn.Deps.Simulated) > 0, adapters: map[int]string{}, samplers: map[string]string{}, resumed: resumed,
		trainer:  boundedTrainer{rn.Deps.Trainer, time.Duration(r.Trainer.CallTimeoutSeconds * float64(time.Second))},
		judgeSem: make(semaphore, max(r.Judge.Concurrency, 1))}
	rn.last = ru
	if ru.ret, err = loadRetention(dir, r.Checkpoint.Keep); err != nil {
		return nil, err
	}
	if ru.prior, err = readTrainerModel(dir); err != nil {
		return nil, err
	}
	if err := ru.load(); err != nil {
		return nil, err
	}
	if err := doctor.Preflight(ctx, r, rn.Deps); err != nil {
		return nil, err
	}
	if ru.sim {
		fmt.Fprintf(rn.Out, "SIMULATED: %s served by the embedded hindsearch simulator, not by language models; results show the control plane at work, not model quality.\n",
			strings.Join(rn.Deps.Simulated, ", "))
	}
	if ru.excluded > 0 {
		fmt.Fprintf(rn.Out, "train.exclude_eval: %d training questions that are also evaluation questions left out of training (%d remain)\n", ru.excluded, len(ru.train))
	}
	// With train.exclude_eval no evaluation question is left to train on.
	if !r.Train.ExcludeEval {
		if w := dataset.Contamination(ru.train, ru.evalSet); w != "" {
			fmt.Fprintf(rn.Out, "WARNING: %s\n", w)
		}
	}
	fmt.Fprintf(rn.Out, "run %s: %d steps x %d questions x %d samples, %s; output %s\n",
		r.Name, r.Train.Steps, r.Train.BatchSize, r.Train.GroupSize, r.Switches(), dir.Path)
	return ru.loop(ctx)
}

// claim refuses to mix a new run into an earlier run's files.
func (rn *Runner) claim(dir *results.RunDir) error {
	names := []string{"steps.jsonl", "eval.jsonl", "state.json"}
	var found []string
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(dir.Path, n)); err == nil {
			found = append(found, n)
		}
	}
	if len(found) == 0 {
		return nil
	}
	if !rn.Overwrite {
		return fmt.Errorf("output.dir %s already holds a run (%s): pass --overwrite to replace it, or choose another directory with --set output.dir=DIR",
			dir.Path, strings.Join(found, ", "))
	}
	for _, n := range append(names, "trajectories", "questions", "adapters", "checkpoints") {
		if err := os.RemoveAll(filepath.Join(dir.Path, n)); err != nil {
			return fmt.Errorf("overwrite %s: %w", dir.Path, err)
		}
	}
	// The replaced run's trainer checkpoints stay in the ledger, no longer
	// a resume point: the new run's first prune deletes them on the
	// trainer (they are this directory's, and would otherwise never be).
	return supersedeLedger(dir)
}

func (ru *run) load() error {
	r := ru.r
	for _, f := range r.Train.Data {
		qs, err := dataset.Load(f)
		if err != nil {
			return fmt.Errorf("train.data: %w", err)
		}
		ru.train = append(ru.train, qs...)
	}
	sets, err := dataset.EvalSets(r)
	if err != nil {
		return err
	}
	ru.evalSet = sets
	if r.Train.ExcludeEval {
		ru.train, ru.excluded = dataset.Exclude(ru.train, sets)
		if len(ru.train) == 0 && r.Train.Steps > 0 {
			return fmt.Errorf("train.data: every training question is also an evaluation question (train.exclude_eval drops them): point train.data at a training split, or set train.exclude_eval=false")
		}
	}
	tmpl, err := ParseJudgePrompt(r.Hindsight.Prompt)
	if err != nil {
		return err
	}
	clock := newPhaseClock()
	if ru.roller, err = newRoller(r, ru.Deps, clock); err != nil {
		return err
	}
	ru.roller.metrics = ru.Metrics
	ru.hinter = newHinter(r, ru.Deps.Judge, tmpl, clock)
	evr, _ := newRoller(r, ru.Deps, nil)
	evr.reps = ru.roller.reps // one view of the replicas' health
	evr.metrics = ru.Metrics
	ru.ev = &evaluator{roller: evr, datasets: ru.evalSet, concurrency: r.Policy.Concurrency * len(ru.Deps.Policies),
		seed: r.Seed, out: ru.Out, progress: ru.Progress}
	if ru.sync, err = newWeightSync(r, ru.roller.reps); err != nil {
		return err
	}
	// A replica that died and came back is re-admitted once it serves the
	// weights in use again.
	ru.roller.reps.readmit = func(ctx context.Context, p policy.Policy) error {
		ru.syncMu.Lock()
		defer ru.syncMu.Unlock()
		return ru.sync.restore(ctx, p)
	}
	return nil
}

func newHinter(r *recipes.Recipe, j judge.Judge, tmpl *template.Template, clock *phaseClock) *hinter {
	h := r.Hindsight
	return &hinter{judge: j, prompt: tmpl, maxTokens: r.Judge.MaxTokens, sampling: roles.JudgeSampling(r),
		seed: r.Seed, gold: h.GoldAnswer, redact: h.RedactGold, maxChars: h.MaxCritiqueChars, hint: h.HintTemplate,
		loss: h.Loss, broadcast: h.Broadcast, coef: h.Coef, clamp: h.Clamp, phases: clock}
}

// model is the policy model name to sample from now.
func (ru *run) model() string {
	if ru.adapter != "" {
		return ru.adapter
	}
	return ru.r.Policy.Model
}

func (ru *run) loop(ctx context.Context) (*Summary, error) {
	r := ru.r
	sess, err := ru.trainer.StartSession(ctx)
	if err != nil {
		return nil, fmt.Errorf("trainer session: %w", err)
	}
	defer sess.Close()
	// The model of the run this directory held before (interrupted, even
	// by SIGKILL before its first saved state, or replaced by --overwrite)
	// may still hold the trainer (SkyRL's FSDP backend holds one): release
	// it first. Unknown or no longer loaded is fine.
	var prior []string
	if ru.resumed != nil && ru.resumed.ModelID != "" {
		prior = append(prior, ru.resumed.ModelID)
	}
	if ru.prior != "" && !slices.Contains(prior, ru.prior) {
		prior = append(prior, ru.prior)
	}
	for _, id := range prior {
		if err := ru.trainer.UnloadModel(ctx, id); err != nil {
			fmt.Fprintf(ru.Out, "warning: trainer unload_model %s (the earlier run's model in %s): %v\n", id, ru.dir.Path, err)
		}
	}
	ru.modelID, err = ru.trainer.CreateModel(ctx, sess, r.Trainer.BaseModel, r.Trainer.LoRARank, r.Seed)
	if err != nil {
		return nil, ru.createModelError(err)
	}
	if err := writeTrainerModel(ru.dir, ru.modelID, ru.Deps.Trainer.URL()); err != nil {
		ru.unloadModel(ctx)
		return nil, err
	}
	// One model per run, released however the run ends: after ctx is
	// cancelled (SIGINT, SIGTERM) too, on a context of its own.
	defer ru.unloadModel(ctx)
	sum := &Summary{Dir: ru.dir.Path}
	first := 1
	if ru.resumed != nil {
		if err := ru.restore(ctx, sum); err != nil {
			return nil, err
		}
		first = ru.resumed.Step + 1
	} else if err := ru.sync.begin(ctx); err != nil {
		return nil, err
	}
	if ru.resumed == nil && len(ru.evalSet) > 0 {
		recs, err := ru.evaluate(ctx, 0, format.StrategySearch)
		if err != nil {
			return nil, err
		}
		sum.Evals = append(sum.Evals, recs...)
		ru.plotCurves()
	}
	// With train.max_off_policy_steps > 0 the rollouts of step n+1 run
	// while step n trains, syncs and evaluates.
	startCollect := func(step int) chan collectResult {
		ch := make(chan collectResult, 1)
		model := ru.samplingModel(step)
		stream := r.Rollout.Schedule == recipes.ScheduleAsync && r.Train.MaxOffPolicySteps == 0
		go func() {
			c, err := ru.collect(ctx, step, model, stream)
			ch <- collectResult{c, err}
		}()
		return ch
	}
	pipelined := r.Train.MaxOffPolicySteps > 0
	var next chan collectResult
	for step := first; step <= r.Train.Steps; step++ {
		if next == nil {
			next = startCollect(step)
		}
		got := <-next
		next = nil
		if got.err != nil {
			return sum, fmt.Errorf("step %d: %w", step, got.err)
		}
		if pipelined && step < r.Train.Steps {
			next = startCollect(step + 1)
		}
		rec, err := ru.finish(ctx, got.c)
		if err != nil {
			ru.drain(next)
			return sum, fmt.Errorf("step %d: %w", step, err)
		}
		rec.PolicyLag = step - 1 - versionOf(rec.SampledWith, r)
		evaluated := len(ru.evalSet) > 0 && (step%r.Eval.Every == 0 || step == r.Train.Steps)
		if evaluated {
			t0 := time.Now()
			recs, err := ru.evaluate(ctx, step, format.StrategySearch)
			if err != nil {
				ru.drain(next)
				return sum, err
			}
			rec.PhaseSeconds["eval"] = time.Since(t0).Seconds()
			sum.Evals = append(sum.Evals, recs...)
		}
		if err := ru.dir.AppendJSONL("steps.jsonl", rec); err != nil {
			ru.drain(next)
			return sum, fmt.Errorf("record step %d: %w", step, err)
		}
		if step%r.Checkpoint.Every == 0 || step == r.Train.Steps {
			if err := ru.checkpoint(ctx, step, rec.Adapter); err != nil {
				ru.drain(next)
				return sum, fmt.Errorf("record step %d: %w", step, err)
			}
		}
		if evaluated {
			ru.plotCurves()
		}
		sum.Steps = append(sum.Steps, *rec)
		ru.Metrics.RecordStep(rec)
		ru.printStep(rec)
		if ru.afterStep != nil {
			ru.afterStep(step)
		}
	}
	if _, failed := ru.ret.counts(); failed > 0 {
		fmt.Fprintf(ru.Out, "warning: %d deletions of superseded trainer checkpoints failed (%s lists what is left on the trainer)\n", failed, ledgerFile)
	}
	if len(sum.Evals) > 0 {
		fmt.Fprintln(ru.Out)
		if err := results.EvalTable(ru.Out, sum.Evals, ru.caption()); err != nil {
			return sum, err
		}
	}
	return sum, nil
}

// plotCurves redraws training-curves.png; a failure to draw is reported
// and the run goes on (the records it plots are already written).
func (ru *run) plotCurves() {
	if err := results.WriteTrainingCurves(ru.dir); err != nil {
		fmt.Fprintf(ru.Out, "warning: training curves not drawn: %v\n", err)
	}
}

// drain waits for a collection started ahead, so no goroutine outlives the
// run.
func (ru *run) drain(next chan collectResult) {
	if next != nil {
		<-next
	}
}

// versionOf is the step whose weights a model name carries (0: the base).
func versionOf(model string, r *recipes.Recipe) int {
	if m := reStepSuffix.FindStringSubmatch(model); m != nil && model != r.Policy.Model {
		v, _ := strconv.Atoi(m[1])
		return v
	}
	return 0
}

// caption names the recipe and its ablation switches.
func (ru *run) caption() string {
	c := fmt.Sprintf("EM (%%) by evaluation step. recipe %s: %s", ru.r.Name, ru.r.Switches())
	if ru.sim {
		c += ". SIMULATED (" + strings.Join(ru.Deps.Simulated, ", ") + " by the embedded simulator)"
	}
	return c
}

func (ru *run) printStep(rec *results.StepRecord) {
	ph := rec.PhaseSeconds
	fmt.Fprintf(ru.Out, "step %3d/%d  reward(EM) %.3f  F1 %.3f  failed %d/%d  critiques %d  opd_tokens %d (mean %.3f)  rollout %.1fs judge %.1fs teacher %.1fs train %.1fs sync %.1fs eval %.1fs\n",
		rec.Step, ru.r.Train.Steps, rec.RewardMean, rec.F1Mean, rec.Failed, rec.Trajectories, rec.Critiques, rec.OPDTokens, rec.OPDMean,
		ph["rollout"], ph["judge"], ph["teacher"], ph["train"], ph["sync"], ph["eval"])
	if ru.r.Hindsight.Enabled {
		fmt.Fprintf(ru.Out, "          hindsight: non-zero term on %.1f%% of failed trajectories, mean term on search tokens %.4f\n",
			100*rec.OPDFailedShare, rec.OPDSearchMean)
	}
}

// draw returns the next batch of training questions: a deterministic
// shuffle of the training mix per epoch, read from a cursor.
func (ru *run) draw(n int) []dataset.Question {
	out := make([]dataset.Question, 0, n)
	for len(out) < n {
		epoch, pos := ru.cursor/len(ru.train), ru.cursor%len(ru.train)
		perm := rand.New(rand.NewPCG(uint64(ru.r.Seed), uint64(epoch))).Perm(len(ru.train))
		out = append(out, ru.train[perm[pos]])
		ru.cursor++
	}
	return out
}

// groupState gathers a group's trajectories as they finish.
type groupState struct {
	trajs []*Trajectory
	left  atomic.Int32
}

// collectResult is what a collection started ahead delivers.
type collectResult struct {
	c   *collected
	err error
}

// collected is a step's rollouts, critiques and datums, before the
// optimiser step.
type collected struct {
	step    int
	model   string // the policy model the step sampled from
	groups  []*groupState
	sent    []keyedDatum // datums in the order they reached the sender
	clock   *phaseClock
	t0      time.Time
	fb      []map[string]float64
	streamd bool // datums went to forward_backward while rolling out
	// sampled records which replica sampled with which weights.
	sampled *sampledBy

	critiques, critiqueFailures, opdTokens int64
	opdSum                                 float64
}

// collect runs steps 1-5 of DESIGN §2 for one step: draw, roll out with
// model, score, advantages, hindsight. With stream set (the on-policy async
// schedule) each finished group's datums go to forward_backward at once,
// while other groups still roll out; otherwise finish sends them.
func (ru *run) collect(ctx context.Context, step int, model string, stream bool) (*collected, error) {
	r := ru.r
	c := &collected{step: step, model: model, clock: newPhaseClock(), t0: time.Now(), streamd: stream}
	clock := c.clock
	ru.roller.phases, ru.hinter.phases = clock, clock
	ru.roller.resetStep(ctx)
	// A replica that failed to load the weights at the last sync gets them
	// now; none holding them fails the step.
	if err := ru.ensure(ctx, model); err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	c.sampled = &sampledBy{}
	ru.roller.sampled = c.sampled
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	qs := ru.draw(r.Train.BatchSize)
	G := r.Train.GroupSize
	task := ru.Progress.Start(fmt.Sprintf("rollout step %d", step), len(qs)*G, "trajectories")
	defer task.Done()
	ru.roller.progress = task
	sp := roles.TrainSampling(r)

	datums := make(chan keyedDatum, len(qs)*G)
	var trainErr error
	senderDone := make(chan struct{})
	go func() {
		defer close(senderDone)
		if !stream {
			for d := range datums {
				c.sent = append(c.sent, d)
			}
			return
		}
		var chunk []trainer.Datum
		flush := func() {
			if len(chunk) == 0 || trainErr != nil {
				return
			}
			done := clock.start("train")
			res, err := ru.trainer.ForwardBackward(ctx, ru.modelID, chunk, r.Trainer.Loss, lossConfig(r))
			done()
			if err != nil {
				trainErr = fmt.Errorf("forward_backward: %w", err)
				cancel()
				return
			}
			c.fb = append(c.fb, res.Metrics)
			chunk = nil
		}
		for d := range datums {
			c.sent = append(c.sent, d)
			chunk = append(chunk, d.datum)
			if len(chunk) >= r.Trainer.ChunkSize {
				flush()
			}
		}
		flush()
	}()

	var critiques, critiqueFailures, opdTokens atomic.Int64
	var opdMu sync.Mutex
	c.groups = make([]*groupState, len(qs))
	// Groups' hindsight runs as they complete; judge.concurrency bounds the
	// judge requests inside.
	hp := pool.New().WithContext(ctx)
	finishGroup := func(gi int) {
		g := c.groups[gi]
		rewards := make([]float64, len(g.trajs))
		for i, t := range g.trajs {
			t.score()
			rewards[i] = t.Reward
		}
		for i, a := range GroupAdvantages(rewards) {
			g.trajs[i].Advantage = a
		}
		hp.Go(func(ctx context.Context) error {
			if r.Hindsight.Enabled {
				cr, f, n, sum := ru.hindsight(ctx, g.trajs)
				critiques.Add(cr)
				critiqueFailures.Add(f)
				opdTokens.Add(n)
				opdMu.Lock()
				c.opdSum += sum
				opdMu.Unlock()
			}
			for _, t := range g.trajs {
				if !slices.Contains(t.Policy, true) {
					// No policy token (the prompt alone filled the context):
					// nothing to learn, and a zero weight sum would divide by
					// zero in trainers that normalise per sequence.
					continue
				}
				datums <- keyedDatum{group: t.Group, sample: t.Sample, datum: BuildDatum(t, ru.advantageSign, r.Hindsight.Coef)}
			}
			return nil
		})
	}
	var ls []*live
	for gi, q := range qs {
		g := &groupState{trajs: make([]*Trajectory, G)}
		g.left.Store(int32(G))
		c.groups[gi] = g
		group := (step-1)*r.Train.BatchSize + gi // globally unique group id
		for k := 0; k < G; k++ {
			g.trajs[k] = &Trajectory{ID: fmt.Sprintf("s%04d-g%06d-k%d", step, group, k), Step: step, Group: group, Sample: k, Question: q}
		}
	}
	concurrency := max(r.Policy.Concurrency*len(ru.Deps.Policies), 1)
	rollDone := clock.start("rollout")
	var rollErr error
	if r.Rollout.Schedule == recipes.ScheduleLockstep {
		rollErr = ru.prompts(ctx, c.groups, concurrency)
		if rollErr == nil {
			for _, g := range c.groups {
				for _, t := range g.trajs {
					ls = append(ls, newLive(t, model, sp, roles.Seed(r.Seed, int64(step), int64(t.Group), int64(t.Sample))))
				}
			}
			rollErr = ru.roller.lockstep(ctx, ls, concurrency)
		}
		if rollErr == nil {
			for gi := range c.groups {
				finishGroup(gi)
			}
		}
	} else {
		rp := pool.New().WithContext(ctx).WithCancelOnError().WithFirstError().WithMaxGoroutines(concurrency)
		for gi, g := range c.groups {
			var promptOnce sync.Once
			var prompt []int
			var promptErr error
			for _, t := range g.trajs {
				rp.Go(func(ctx context.Context) error {
					promptOnce.Do(func() { prompt, promptErr = ru.roller.promptIDs(ctx, t.Question.Question, "") })
					if promptErr != nil {
						return promptErr
					}
					t.PromptIDs = prompt
					if err := ru.roller.rollout(ctx, t, model, sp, roles.Seed(r.Seed, int64(step), int64(t.Group), int64(t.Sample))); err != nil {
						return err
					}
					if g.left.Add(-1) == 0 {
						finishGroup(gi)
					}
					return nil
				})
			}
		}
		rollErr = rp.Wait()
	}
	rollDone()
	_ = hp.Wait()
	close(datums)
	<-senderDone
	c.critiques, c.critiqueFailures, c.opdTokens = critiques.Load(), critiqueFailures.Load(), opdTokens.Load()
	if rollErr != nil {
		return nil, fmt.Errorf("rollout: %w", rollErr)
	}
	if trainErr != nil {
		return nil, trainErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c, nil
}

// prompts tokenizes each group's prompt once, for the lockstep schedule.
func (ru *run) prompts(ctx context.Context, groups []*groupState, concurrency int) error {
	p := pool.New().WithContext(ctx).WithCancelOnError().WithFirstError().WithMaxGoroutines(concurrency)
	for _, g := range groups {
		p.Go(func(ctx context.Context) error {
			ids, err := ru.roller.promptIDs(ctx, g.trajs[0].Question.Question, "")
			for _, t := range g.trajs {
				t.PromptIDs = ids
			}
			return err
		})
	}
	return p.Wait()
}

// finish runs steps 6-7 of DESIGN §2 for a collected step: the datums not
// yet sent (in canonical order), optim_step, save_weights_for_sampler and
// the weight sync; it returns the step's record.
func (ru *run) finish(ctx context.Context, c *collected) (*results.StepRecord, error) {
	r := ru.r
	clock := c.clock
	if !c.streamd {
		ordered := append([]keyedDatum(nil), c.sent...)
		sortKeyed(ordered)
		for lo := 0; lo < len(ordered); lo += r.Trainer.ChunkSize {
			hi := min(lo+r.Trainer.ChunkSize, len(ordered))
			chunk := make([]trainer.Datum, 0, hi-lo)
			for _, d := range ordered[lo:hi] {
				chunk = append(chunk, d.datum)
			}
			done := clock.start("train")
			res, err := ru.trainer.ForwardBackward(ctx, ru.modelID, chunk, r.Trainer.Loss, lossConfig(r))
			done()
			if err != nil {
				return nil, fmt.Errorf("forward_backward: %w", err)
			}
			c.fb = append(c.fb, res.Metrics)
		}
	}
	done := clock.start("train")
	om, err := ru.trainer.OptimStep(ctx, ru.modelID, trainer.AdamParams{LearningRate: r.Trainer.LearningRate,
		Beta1: r.Trainer.Beta1, Beta2: r.Trainer.Beta2, Eps: r.Trainer.Eps, WeightDecay: r.Trainer.WeightDecay})
	done()
	if err != nil {
		return nil, fmt.Errorf("optim_step: %w", err)
	}
	name := reUnsafe.ReplaceAllString(r.Name, "_") + fmt.Sprintf("-step%04d", c.step)
	done = clock.start("sync")
	if err := ru.ret.add(trainerCheckpoint{ModelID: ru.modelID, ID: "sampler_weights/" + name, Step: c.step}); err != nil {
		done()
		return nil, err
	}
	path, err := ru.trainer.SaveWeightsForSampler(ctx, ru.modelID, name)
	if err != nil {
		done()
		return nil, fmt.Errorf("save_weights_for_sampler: %w", err)
	}
	ru.syncMu.Lock()
	err = ru.sync.apply(ctx, path, name)
	ru.syncMu.Unlock()
	if err != nil {
		done()
		return nil, err
	}
	done()
	ru.mu.Lock()
	ru.adapter = name
	ru.adapters[c.step] = name
	ru.samplers[name] = path
	ru.lastStep = c.step
	ru.mu.Unlock()
	// The replicas serve name now: older sampler archives that no resume
	// point and no later step needs go.
	ru.pruneTrainer(ctx)

	var all []*Trajectory
	for _, g := range c.groups {
		all = append(all, g.trajs...)
	}
	ru.lastTrajs, ru.lastStart = all, c.t0
	rec := ru.record(c.step, all, c.sent, clock, c.t0)
	rec.Critiques, rec.CritiqueFailures = int(c.critiques), int(c.critiqueFailures)
	rec.CritiqueMeanChars = critiqueMeanChars(all)
	rec.OPDFailedShare, rec.OPDSearchMean = hindsightDensity(all)
	rec.OPDTokens = int(c.opdTokens)
	if rec.OPDTokens > 0 {
		rec.OPDMean = c.opdSum / float64(rec.OPDTokens)
	}
	rec.Adapter = name
	rec.SampledWith = c.model
	rec.Replicas = c.sampled.snapshot()
	rec.TrainerMetrics = mergeMetrics(c.fb, om)
	if err := ru.keepTrajectories(c.step, all); err != nil {
		return nil, err
	}
	return rec, nil
}

// samplingModel is the policy model step samples from: the weights of step
// step-1-k under train.max_off_policy_steps = k (the base model before any).
func (ru *run) samplingModel(step int) string {
	v := step - 1 - ru.r.Train.MaxOffPolicySteps
	ru.mu.Lock()
	defer ru.mu.Unlock()
	if name, ok := ru.adapters[v]; ok && v > 0 {
		return name
	}
	return ru.r.Policy.Model
}

func lossConfig(r *recipes.Recipe) map[string]float64 {
	if r.Trainer.Loss != recipes.TrainerLossPPO {
		return nil
	}
	return map[string]float64{"clip_low_threshold": r.Trainer.ClipLow, "clip_high_threshold": r.Trainer.ClipHigh}
}

// mergeMetrics merges the forward_backward metrics of a step's chunks by
// the suffix of their names, SkyRL's reduction marks
// (skyrl_train_backend.py): ":mean" the mean over the chunks that report
// it, ":max" and ":min" the extreme, ":last" the last chunk's, ":sum" and
// no suffix the sum. optim_step's metrics are taken as they are.
func mergeMetrics(fb []map[string]float64, om map[string]float64) map[string]float64 {
	out := map[string]float64{}
	seen := map[string]int{}
	for _, m := range fb {
		for k, v := range m {
			key := "forward_backward/" + k
			n := seen[key]
			seen[key]++
			switch {
			case n == 0:
				out[key] = v
			case strings.HasSuffix(k, ":mean"):
				out[key] += (v - out[key]) / float64(n+1)
			case strings.HasSuffix(k, ":max"):
				out[key] = max(out[key], v)
			case strings.HasSuffix(k, ":min"):
				out[key] = min(out[key], v)
			case strings.HasSuffix(k, ":last"):
				out[key] = v
			default:
				out[key] += v
			}
		}
	}
	for k, v := range om {
		out["optim_step/"+k] = v
	}
	return out
}

// hindsight critiques a group's failed trajectories and sets their OPD
// terms. It returns the counts of critiques used, critique failures, OPD
// tokens (non-zero terms) and the sum of the OPD terms. Failures are
// counted, never fatal.
func (ru *run) hindsight(ctx context.Context, trajs []*Trajectory) (used, failed, tokens int64, sum float64) {
	// The group's failed trajectories are critiqued and scored together:
	// the last group of a step then costs one judge and one teacher latency,
	// not one per failed trajectory.
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, t := range trajs {
		if t.Reward > 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok := ru.hindsightOne(ctx, t)
			mu.Lock()
			defer mu.Unlock()
			if !ok {
				failed++
				return
			}
			used++
			for _, d := range t.OPD {
				if d != 0 {
					tokens++
					sum += d
				}
			}
		}()
	}
	wg.Wait()
	return used, failed, tokens, sum
}

// hindsightOne critiques one failed trajectory and sets its OPD term; false
// means no usable critique or teacher score (recorded on t).
func (ru *run) hindsightOne(ctx context.Context, t *Trajectory) bool {
	if err := ru.judgeSem.acquire(ctx); err != nil {
		t.CritiqueError = err.Error()
		return false
	}
	c, why, err := ru.hinter.critique(ctx, t)
	ru.judgeSem.release()
	switch {
	case err != nil:
		t.CritiqueError = err.Error()
		return false
	case why != "":
		t.Critique, t.CritiqueError = c, why
		return false
	}
	t.Critique = c
	if ru.r.Hindsight.Loss == recipes.HindsightLossNone {
		return true
	}
	tp, err := ru.roller.promptIDs(ctx, t.Question.Question, ru.hinter.hintText(c))
	student := t.Logprobs
	if err == nil && ru.r.Hindsight.StudentLogprobs == recipes.StudentLogprobsRescored {
		// The student's tokens scored by the teacher's prefill route, in
		// the context that sampled them, by the model that sampled them.
		err = ru.roller.reps.callFor(ctx, t.Model, func(p policy.Policy) (err error) {
			student, err = ru.hinter.rescore(ctx, t, p, ru.roller.reps.wire(t.Model))
			return err
		})
		t.StudentRescored = err == nil
	}
	if err == nil {
		tm := ru.teacherModel(t)
		err = ru.roller.reps.callFor(ctx, tm, func(p policy.Policy) (err error) {
			t.OPD, err = ru.hinter.opd(ctx, t, tp, p, ru.roller.reps.wire(tm), student)
			return err
		})
	}
	if err != nil {
		t.CritiqueError = err.Error()
		return false
	}
	return true
}

// semaphore bounds concurrent calls.
type semaphore chan struct{}

func (s semaphore) acquire(ctx context.Context) error {
	select {
	case s <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s semaphore) release() { <-s }

// teacherModel is the model name that scores t's teacher context: self is
// the policy that sampled t.
func (ru *run) teacherModel(t *Trajectory) string {
	switch ru.r.Hindsight.Teacher {
	case recipes.TeacherSelf:
		return t.Model
	case recipes.TeacherInitial:
		return ru.r.Policy.Model
	default:
		return ru.r.Hindsight.Teacher
	}
}

func (ru *run) record(step int, all []*Trajectory, sent []keyedDatum, clock *phaseClock, t0 time.Time) *results.StepRecord {
	rec := &results.StepRecord{Step: step, Trajectories: len(all), Simulated: ru.sim}
	turns, searches := 0, 0
	for _, t := range all {
		rec.RewardMean += t.Reward
		rec.F1Mean += t.F1
		if t.Reward == 0 {
			rec.Failed++
		}
		turns += len(t.Turns)
		searches += t.Searches()
	}
	if n := float64(len(all)); n > 0 {
		rec.RewardMean /= n
		rec.F1Mean /= n
		rec.EMMean = rec.RewardMean
		rec.MeanTurns = float64(turns) / n
		rec.MeanSearches = float64(searches) / n
	}
	ph := clock.seconds()
	rec.PhaseSeconds = map[string]float64{"rollout": ph["rollout"], "judge": ph["judge"], "teacher": ph["teacher"],
		"train": ph["train"], "sync": ph["sync"], "eval": 0}
	if ru.r.Hindsight.StudentLogprobs == recipes.StudentLogprobsRescored {
		rec.PhaseSeconds["rescore"] = ph["rescore"]
		for _, t := range all {
			if t.StudentRescored {
				rec.Rescores++
			}
		}
	}
	rec.BatchDigest = batchDigest(sent)
	rec.WallSeconds = time.Since(t0).Seconds()
	return rec
}

// keepTrajectories writes a bounded sample of the step's trajectories, with
// their critiques and OPD terms, to trajectories/step-NNNN.jsonl: whole
// groups in group order, failed-first groups preferred so critiques show.
func (ru *run) keepTrajectories(step int, all []*Trajectory) error {
	n := ru.r.Output.Trajectories
	if n <= 0 {
		return nil
	}
	picked := append([]*Trajectory(nil), all...)
	sort.SliceStable(picked, func(i, j int) bool {
		ci, cj := picked[i].Critique != "", picked[j].Critique != ""
		if ci != cj {
			return ci
		}
		if picked[i].Group != picked[j].Group {
			return picked[i].Group < picked[j].Group
		}
		return picked[i].Sample < picked[j].Sample
	})
	if len(picked) > n {
		picked = picked[:n]
	}
	for _, t := range picked {
		t.Pieces = tokenPieces(ru.roller.tok.Vocab, t)
	}
	var b strings.Builder
	for _, t := range picked {
		line, err := json.Marshal(t)
		if err != nil {
			return fmt.Errorf("keep trajectories: %w", err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := ru.dir.WriteFileAtomic(filepath.Join("trajectories", fmt.Sprintf("step-%04d.jsonl", step)), []byte(b.String())); err != nil {
		return err
	}
	return pruneTrajectories(filepath.Join(ru.dir.Path, "trajectories"), step, ru.r.Output.TrajectorySteps, ru.r.Eval.Every)
}

// pruneTrajectories removes the trajectory files of steps older than the
// latest keep (up to step) that are not multiples of every; keep 0 keeps
// all.
func pruneTrajectories(dir string, step, keep, every int) error {
	if keep <= 0 {
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("prune trajectories: %w", err)
	}
	for _, e := range ents {
		var s int
		if _, err := fmt.Sscanf(e.Name(), "step-%04d.jsonl", &s); err != nil || e.Name() != fmt.Sprintf("step-%04d.jsonl", s) {
			continue
		}
		if s > step-keep || (every > 0 && s%every == 0) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("prune trajectories: %w", err)
		}
	}
	return nil
}

// critiqueMeanChars is the mean length in characters of the critiques used
// as hints (0 without any).
func critiqueMeanChars(all []*Trajectory) float64 {
	n, chars := 0, 0
	for _, t := range all {
		if t.Critique != "" && t.CritiqueError == "" {
			n++
			chars += utf8.RuneCountInString(t.Critique)
		}
	}
	if n == 0 {
		return 0
	}
	return float64(chars) / float64(n)
}

// hindsightDensity measures how dense the hindsight signal is: the share
// of failed trajectories (reward 0) with a non-zero term on at least one
// token, and the mean term over the search tokens of the failed
// trajectories that got a term (zeros included). Both are 0 without any.
func hindsightDensity(all []*Trajectory) (share, searchMean float64) {
	failed, nonzero, searchTokens := 0, 0, 0
	sum := 0.0
	for _, t := range all {
		if t.Reward != 0 {
			continue
		}
		failed++
		if len(t.OPD) == 0 {
			continue
		}
		if slices.ContainsFunc(t.OPD, func(d float64) bool { return d != 0 }) {
			nonzero++
		}
		for i, d := range t.OPD {
			if i < len(t.Search) && t.Search[i] {
				searchTokens++
				sum += d
			}
		}
	}
	if failed > 0 {
		share = float64(nonzero) / float64(failed)
	}
	if searchTokens > 0 {
		searchMean = sum / float64(searchTokens)
	}
	return share, searchMean
}

// evaluate runs one greedy evaluation of the current model and appends its
// records to eval.jsonl and questions/.
func (ru *run) evaluate(ctx context.Context, step int, strategy string) ([]results.EvalRecord, error) {
	if err := ru.ensure(ctx, ru.model()); err != nil {
		return nil, fmt.Errorf("evaluate at step %d: %w", step, err)
	}
	recs, qrecs, err := ru.ev.evaluate(ctx, step, strategy, ru.model())
	if err != nil {
		return nil, err
	}
	ru.Metrics.RecordEval(recs)
	return recs, recordEval(ru.dir, step, strategy, recs, qrecs)
}

// recordEval appends an evaluation's records to the run directory.
func recordEval(dir *results.RunDir, step int, strategy string, recs []results.EvalRecord, qrecs []results.QuestionRecord) error {
	if err := dir.WriteQuestions(step, strategy, qrecs); err != nil {
		return fmt.Errorf("record evaluation: %w", err)
	}
	for _, rec := range recs {
		if err := dir.AppendJSONL("eval.jsonl", rec); err != nil {
			return fmt.Errorf("record evaluation: %w", err)
		}
	}
	return nil
}

// newRoller builds the rollout engine of a recipe over deps; it needs the
// local tokenizer (Deps.Tokenizer).
func newRoller(r *recipes.Recipe, deps roles.Deps, clock *phaseClock) (*roller, error) {
	tok, err := deps.LocalTokenizer()
	if err != nil {
		return nil, err
	}
	window := time.Duration(r.Retriever.BatchWindowMS * float64(time.Millisecond))
	return &roller{reps: newReplicas(deps.Policies), retriever: deps.Retriever, topk: r.Retriever.TopK,
		maxTurns: r.Rollout.MaxTurns, maxTurn: r.Rollout.MaxTurnTokens, maxObs: r.Rollout.MaxObsTokens,
		maxCtx: r.Rollout.MaxContextTokens, baseModel: r.Policy.Model, phases: clock,
		batch:    newBatcher(deps.Retriever, r.Retriever.TopK, window, r.Retriever.MaxBatch, r.Retriever.Cache),
		maxBatch: r.Retriever.MaxBatch, tok: tok, local: r.Policy.Tokenize == recipes.TokenizeLocal}, nil
}

// checkpoint saves the trainer's full state after step and then writes
// state.json, the resume point: a crash before it resumes from the step
// before.
func (ru *run) checkpoint(ctx context.Context, step int, adapter string) error {
	name := reUnsafe.ReplaceAllString(ru.r.Name, "_") + fmt.Sprintf("-state%04d", step)
	if err := ru.ret.add(trainerCheckpoint{ModelID: ru.modelID, ID: "weights/" + name, Step: step}); err != nil {
		return err
	}
	path, err := ru.trainer.SaveState(ctx, ru.modelID, name)
	if err != nil {
		return fmt.Errorf("save_weights: %w", err)
	}
	ru.mu.Lock()
	// Every step draws exactly batch_size questions; the cursor after step
	// is not ru.cursor, which a collection started ahead may have moved.
	st := state{Step: step, Adapter: adapter, ModelID: ru.modelID, Cursor: step * ru.r.Train.BatchSize, Simulated: ru.sim,
		Updated: time.Now().UTC().Format(time.RFC3339), TrainerState: path,
		Adapters: map[int]string{}, Samplers: map[string]string{}}
	// The adapters a later step may still sample from (off-policy) or
	// serve: the newest k+1.
	for v, n := range ru.adapters {
		if v >= step-ru.r.Train.MaxOffPolicySteps {
			st.Adapters[v] = n
			st.Samplers[n] = ru.samplers[n]
		}
	}
	ru.mu.Unlock()
	b, _ := json.MarshalIndent(st, "", "  ")
	if err := ru.dir.WriteFileAtomic("state.json", append(b, '\n')); err != nil {
		return err
	}
	// The new state is complete: the states beyond checkpoint.keep, and
	// the sampler archives only the old resume point needed, go.
	ru.mu.Lock()
	ru.lastState = &st
	ru.mu.Unlock()
	if err := ru.ret.complete(ru.modelID, "weights/"+name, step); err != nil {
		return err
	}
	ru.pruneTrainer(ctx)
	return nil
}

// pruneTrainer deletes the trainer checkpoints the run no longer needs
// (retention.prune with the run's trainer, sampler rule and output).
func (ru *run) pruneTrainer(ctx context.Context) {
	ru.ret.prune(ctx, ru.trainer, ru.samplerNeeded, ru.Out)
}

// samplerNeeded reports whether the sampler archive name of modelID is
// still needed: listed in the newest state.json (a resume serves it
// again), or the weights of a step that a later step may still sample
// from (the newest, and the max_off_policy_steps before it). Replicas and
// evaluations load the unpacked copies in sync.dir, not the archive.
func (ru *run) samplerNeeded(modelID, name string) bool {
	ru.mu.Lock()
	defer ru.mu.Unlock()
	match := func(path string) bool {
		m, id, ok := checkpointRef(path)
		return ok && m == modelID && id == "sampler_weights/"+name
	}
	if st := ru.lastState; st != nil {
		for _, p := range st.Samplers {
			if match(p) {
				return true
			}
		}
	}
	for v, n := range ru.adapters {
		if v >= ru.lastStep-ru.r.Train.MaxOffPolicySteps && match(ru.samplers[n]) {
			return true
		}
	}
	return false
}

// unloadTimeout bounds the unload_model a run sends as it ends.
const unloadTimeout = 5 * time.Minute

// unloadModel releases the run's model on the trainer on a context of its
// own (ctx may be cancelled: an interrupted run releases it too); a
// failure is reported, since it is not the run's.
func (ru *run) unloadModel(ctx context.Context) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unloadTimeout)
	defer cancel()
	if err := ru.Deps.Trainer.UnloadModel(uctx, ru.modelID); err != nil {
		fmt.Fprintf(ru.Out, "warning: trainer unload_model %s: %v (the trainer keeps the model until its session has been silent for about 5 minutes)\n", ru.modelID, err)
	}
}

// createModelError explains a create_model that SkyRL refused because it
// already holds a policy model (its FSDP backend trains one at a time).
func (ru *run) createModelError(err error) error {
	msg := err.Error()
	if !strings.Contains(msg, "already has a 'policy' model") && !strings.Contains(msg, "Cannot register an additional LoRA adapter") &&
		!strings.Contains(msg, "register_adapter is not implemented") {
		return fmt.Errorf("trainer create_model: %w", err)
	}
	return fmt.Errorf("%w\n%s already holds a policy model, so it cannot create %s at trainer.lora_rank %d (SkyRL's FSDP backend trains one model at a time): another run holds the trainer, or a run that ended without releasing its model. Wait about 5 minutes for SkyRL's stale-session cleanup (a session silent for 300 s, checked every 60 s) if that run is gone, stop the other run, or restart the trainer server; `orchestrate doctor` checks the trainer",
		err, ru.Deps.Trainer.URL(), ru.r.Trainer.BaseModel, ru.r.Trainer.LoRARank)
}

// readState reads a run directory's resume point.
func readState(dir *results.RunDir) (*state, error) {
	b, err := os.ReadFile(filepath.Join(dir.Path, "state.json"))
	if err != nil {
		return nil, fmt.Errorf("--resume: %s has no completed step to resume from (%w)", dir.Path, err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("--resume: %s/state.json: %w", dir.Path, err)
	}
	if st.TrainerState == "" {
		return nil, fmt.Errorf("--resume: %s/state.json has no trainer state", dir.Path)
	}
	return &st, nil
}

// restore prepares a resumed run: drops records past the resume point,
// restores the trainer state into the new model and serves the adapters
// again; the summary gets the records kept.
func (ru *run) restore(ctx context.Context, sum *Summary) error {
	st := ru.resumed
	steps, err := ru.dir.ReadSteps()
	if err != nil {
		return err
	}
	evals, err := ru.dir.ReadEval()
	if err != nil {
		return err
	}
	keptSteps, err := keepRecords(ru.dir, "steps.jsonl", steps, func(r results.StepRecord) bool { return r.Step <= st.Step })
	if err != nil {
		return err
	}
	keptEvals, err := keepRecords(ru.dir, "eval.jsonl", evals, func(r results.EvalRecord) bool { return r.Step <= st.Step })
	if err != nil {
		return err
	}
	sum.Steps, sum.Evals = keptSteps, keptEvals
	if err := ru.trainer.LoadState(ctx, ru.modelID, st.TrainerState); err != nil {
		return fmt.Errorf("--resume: load_weights %s: %w", st.TrainerState, err)
	}
	ru.cursor, ru.adapter = st.Cursor, st.Adapter
	ru.lastState, ru.lastStep = st, st.Step
	vs := make([]int, 0, len(st.Adapters))
	for v := range st.Adapters {
		vs = append(vs, v)
	}
	sort.Ints(vs)
	names := make([]string, 0, len(vs))
	for _, v := range vs {
		names = append(names, st.Adapters[v])
	}
	if err := ru.sync.resume(ctx, names, st.Samplers); err != nil {
		return fmt.Errorf("--resume: %w", err)
	}
	for _, v := range vs {
		name := st.Adapters[v]
		ru.adapters[v], ru.samplers[name] = name, st.Samplers[name]
	}
	// A run directory written before the ledger: its resume point's
	// samplers are the run's to delete once superseded.
	for _, v := range vs {
		if m, id, ok := checkpointRef(st.Samplers[st.Adapters[v]]); ok {
			if err := ru.ret.add(trainerCheckpoint{ModelID: m, ID: id, Step: v}); err != nil {
				return err
			}
		}
	}
	// The resume point is complete; what the interrupted run saved after
	// it (and what it superseded) goes, under its model id.
	if m, id, ok := checkpointRef(st.TrainerState); ok {
		if err := ru.ret.complete(m, id, st.Step); err != nil {
			return err
		}
	}
	ru.pruneTrainer(ctx)
	fmt.Fprintf(ru.Out, "resuming %s after step %d\n", ru.dir.Path, st.Step)
	return nil
}

// openRunDir creates the run directory and takes its lock.
func openRunDir(path string) (*results.RunDir, *results.Lock, error) {
	dir, err := results.Create(path)
	if err != nil {
		return nil, nil, fmt.Errorf("output.dir: %w", err)
	}
	lock, err := dir.Lock()
	if err != nil {
		return nil, nil, err
	}
	return dir, lock, nil
}

// boundedTrainer bounds every training call, its future's polling
// included, so that a future that never resolves fails the step.
type boundedTrainer struct {
	trainer.Trainer
	timeout time.Duration
}

func (b boundedTrainer) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if b.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, b.timeout)
}

func (b boundedTrainer) wrap(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w (trainer.call_timeout_seconds is %v; continue with --resume)", err, b.timeout.Seconds())
	}
	return err
}

func (b boundedTrainer) ForwardBackward(ctx context.Context, modelID string, data []trainer.Datum, lossFn string, lossCfg map[string]float64) (*trainer.ForwardBackwardResult, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	res, err := b.Trainer.ForwardBackward(ctx, modelID, data, lossFn, lossCfg)
	return res, b.wrap(err)
}

func (b boundedTrainer) OptimStep(ctx context.Context, modelID string, adam trainer.AdamParams) (map[string]float64, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	m, err := b.Trainer.OptimStep(ctx, modelID, adam)
	return m, b.wrap(err)
}

func (b boundedTrainer) SaveWeightsForSampler(ctx context.Context, modelID, name string) (string, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	p, err := b.Trainer.SaveWeightsForSampler(ctx, modelID, name)
	return p, b.wrap(err)
}

func (b boundedTrainer) SaveState(ctx context.Context, modelID, name string) (string, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	p, err := b.Trainer.SaveState(ctx, modelID, name)
	return p, b.wrap(err)
}

func (b boundedTrainer) LoadState(ctx context.Context, modelID, path string) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.wrap(b.Trainer.LoadState(ctx, modelID, path))
}

// keepRecords rewrites a JSONL file of the run directory, atomically, with
// the records that keep accepts, and returns them.
func keepRecords[T any](dir *results.RunDir, name string, recs []T, keep func(T) bool) ([]T, error) {
	var kept []T
	var b strings.Builder
	for _, r := range recs {
		if keep(r) {
			kept = append(kept, r)
			line, _ := json.Marshal(r)
			b.Write(line)
			b.WriteByte('\n')
		}
	}
	return kept, dir.WriteFileAtomic(name, []byte(b.String()))
}

func (b boundedTrainer) UnloadModel(ctx context.Context, modelID string) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.wrap(b.Trainer.UnloadModel(ctx, modelID))
}

func (b boundedTrainer) DeleteCheckpoint(ctx context.Context, modelID, id string) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.wrap(b.Trainer.DeleteCheckpoint(ctx, modelID, id))
}
