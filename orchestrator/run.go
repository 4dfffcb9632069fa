// Package orchestrator is the HindSearch training loop: it draws questions,
// rolls out Search-R1 trajectories against the policy servers and the
// retriever (orchestrator/rollout), rewards them, asks the judge to critique
// failed ones, scores their tokens under the hinted teacher context, streams
// weighted datums to the trainer, syncs the new weights to the policy
// servers (orchestrator/fleet) and evaluates. Runner.Run in run.go reads
// top-down in DESIGN §2's order, each phase a call into the file named for
// it (docs/architecture.md lists them).
package orchestrator

import (
	"context"
	"fmt"
	"github.com/hindsearch/hindsearch/orchestrator/tracking"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/orchestrator/dataset"
	"github.com/hindsearch/hindsearch/orchestrator/fleet"
	"github.com/hindsearch/hindsearch/orchestrator/metrics"
	"github.com/hindsearch/hindsearch/orchestrator/progress"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/orchestrator/rollout"
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
	// endpointsPoll is how often policy.endpoints_file is checked (0:
	// WatchEndpoints' default; tests shorten it).
	endpointsPoll time.Duration
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
	r        *recipes.Recipe
	dir      *results.RunDir
	trainSet []dataset.Question // the training questions (train.data)
	evalSet  map[string][]dataset.Question
	rollouts *rollout.Engine
	hinter   *hinter
	ev       *evaluator
	sync     fleet.Sync
	modelID  string
	// affinityAt is the fleet's affinity counters at the previous step's
	// record (each record holds the difference).
	affinityAt fleet.AffinityStats
	adapter    string // policy model name currently served ("" = base)
	cursor     int
	sim        bool
	// excluded counts the training questions train.exclude_eval dropped.
	excluded int

	mu       sync.Mutex
	adapters map[int]string // step -> adapter name carrying its weights
	// judgeSem bounds the judge requests in flight (judge.concurrency).
	judgeSem semaphore
	// scoreSem bounds the teacher and rescore requests in flight
	// (hindsight.score_concurrency); nil: unbounded.
	scoreSem semaphore
	// scoreGate, when set (hindsight.score_alone), is write-held by each
	// teacher and rescore request and read-held by every policy turn.
	scoreGate *sync.RWMutex
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
	// session is the run's trainer session; initialSampler the sampler
	// path of the initial weights under sync.kind tinker (their sampling
	// session serves policy.model: see serveInitial).
	session        *trainer.Session
	initialSampler string
	// lastTrajs and lastStart are the last finished step's trajectories and
	// start time (for the benchmark).
	lastTrajs []*rollout.Trajectory
	lastStart time.Time
	// backend is trainer.backend resolved (doctor.TrainerBackend): the
	// loss aggregation the trainer computes by itself.
	backend string
	// refNext spreads reference scores over Deps.References.
	refNext atomic.Uint64
	// track is the run's trackers (tracking.*; nil: none).
	track *tracking.Hub
	// healthPast is the run's step health so far, for the collapse alarm
	// (health.go; a resumed run's from its kept records).
	healthPast []results.HealthPoint
}

// Run executes the recipe: an evaluation before training, the training
// steps with evaluations every eval.every steps and after the last, and the
// final table printed to Out.
func (rn *Runner) Run(ctx context.Context) (*Summary, error) {
	ru, unlock, err := rn.prepare(ctx) // prepare.go
	if err != nil {
		return nil, err
	}
	defer unlock()
	sum, err := ru.loop(ctx)
	ru.closeTracking(err == nil)
	return sum, err
}

// model is the policy model name to sample from now.
func (ru *run) model() string {
	if ru.adapter != "" {
		return ru.adapter
	}
	return ru.r.Policy.Model
}

// loop runs the training steps in the order of DESIGN §2, each a call
// into the file named for it: the trainer's model (trainer_model.go), then
// a new run's base weights served and evaluated, or a resumed run's state
// restored (resume.go); then per step: collect (collect.go: draw, roll out,
// reward, critique and teacher score, build datums), train, sync, record,
// evaluate and checkpoint (step); then the report (record.go).
func (ru *run) loop(ctx context.Context) (*Summary, error) {
	r := ru.r
	sess, err := ru.createModel(ctx)
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	ru.session = sess
	// One model per run, released however the run ends: after ctx is
	// cancelled (SIGINT, SIGTERM) too, on a context of its own.
	defer ru.unloadModel(ctx)
	// policy.endpoints_file: the replicas follow the file all run long.
	if f := r.Policy.EndpointsFile; f != "" && ru.Deps.NewPolicy != nil {
		wctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { ru.rollouts.Replicas.WatchEndpoints(wctx, f, ru.endpointsPoll, ru.Deps.NewPolicy, ru.Out) })
		defer func() { stop(); wg.Wait() }()
	}
	// policy.router_url: the router routes to the replicas up, holding
	// the base weights, before the first request.
	if err := ru.rollouts.Replicas.SyncRouter(ctx); err != nil {
		return nil, err
	}
	sum := &Summary{Dir: ru.dir.Path}
	first := 1
	if ru.resumed != nil {
		if err := ru.restore(ctx, sum); err != nil {
			return nil, err
		}
		first = ru.resumed.Step + 1
	} else if err := ru.begin(ctx, sum); err != nil {
		return nil, err
	}
	// With train.max_off_policy_steps > 0 the rollouts of step n+1 run
	// while step n trains, syncs and evaluates.
	var ahead chan collectResult
	defer func() { drain(ahead) }()
	for step := first; step <= r.Train.Steps; step++ {
		if ahead == nil {
			ahead = ru.startCollect(ctx, step)
		}
		got := <-ahead
		ahead = nil
		if got.err != nil {
			return sum, fmt.Errorf("step %d: %w", step, got.err)
		}
		if r.Train.MaxOffPolicySteps > 0 && step < r.Train.Steps {
			ahead = ru.startCollect(ctx, step+1)
		}
		rec, evals, err := ru.step(ctx, got.c)
		sum.Evals = append(sum.Evals, evals...)
		if err != nil {
			return sum, err
		}
		sum.Steps = append(sum.Steps, *rec)
		ru.announce(rec)
	}
	return sum, ru.report(sum)
}

// begin starts a new run: the replicas serve the base weights (sync.go)
// and, with evaluation sets, the base model is evaluated as step 0.
func (ru *run) begin(ctx context.Context, sum *Summary) error {
	if err := ru.sync.Begin(ctx); err != nil {
		return err
	}
	if err := ru.serveInitial(ctx); err != nil {
		return err
	}
	if len(ru.evalSet) == 0 {
		return nil
	}
	recs, err := ru.evaluate(ctx, 0, format.StrategySearch)
	if err != nil {
		return err
	}
	sum.Evals = append(sum.Evals, recs...)
	ru.plotCurves()
	ru.track.Step(tracking.Step{Step: 0, At: time.Now(), Scalars: tracking.Scalars(nil, recs)})
	return nil
}

// step finishes a collected step: train (train.go: forward_backward,
// optim_step), sync (sync.go: save_weights_for_sampler, the replicas load
// it), record (record.go), evaluate when eval.every says so (eval.go),
// append the record to steps.jsonl and checkpoint when checkpoint.every
// says so (checkpoint.go). It returns the step's record and the
// evaluation's records (those of an evaluation made even when a later part
// failed).
func (ru *run) step(ctx context.Context, c *collected) (*results.StepRecord, []results.EvalRecord, error) {
	r := ru.r
	if err := ru.train(ctx, c); err != nil {
		return nil, nil, fmt.Errorf("step %d: %w", c.step, err)
	}
	adapter, err := ru.syncWeights(ctx, c)
	if err != nil {
		return nil, nil, fmt.Errorf("step %d: %w", c.step, err)
	}
	rec, err := ru.record(c, adapter)
	if err != nil {
		return nil, nil, fmt.Errorf("step %d: %w", c.step, err)
	}
	last := c.step == r.Train.Steps
	evaluated := len(ru.evalSet) > 0 && (c.step%r.Eval.Every == 0 || last)
	var evals []results.EvalRecord
	if evaluated {
		t0 := time.Now()
		if evals, err = ru.evaluate(ctx, c.step, format.StrategySearch); err != nil {
			return nil, nil, err
		}
		rec.PhaseSeconds["eval"] = time.Since(t0).Seconds()
	}
	if err := ru.dir.AppendJSONL("steps.jsonl", rec); err != nil {
		return nil, evals, fmt.Errorf("record step %d: %w", c.step, err)
	}
	ru.track.Step(tracking.Step{Step: rec.Step, At: time.Now(), Scalars: tracking.Scalars(rec, evals)})
	if c.step%r.Checkpoint.Every == 0 || last {
		if err := ru.checkpoint(ctx, c.step, rec.Adapter); err != nil {
			return nil, evals, fmt.Errorf("record step %d: %w", c.step, err)
		}
	}
	if evaluated {
		ru.plotCurves()
		ru.track.Files(tracking.RunFiles(ru.dir.Path))
	}
	return rec, evals, nil
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
