// Package orchestrator is the HindSearch training loop: it draws questions,
// rolls out Search-R1 trajectories against the policy servers and the
// retriever, scores them, asks the judge to critique failed ones, scores
// their tokens under the hinted teacher context, streams weighted datums to
// the trainer, syncs the new weights to the policy servers and evaluates.
package orchestrator

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

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
