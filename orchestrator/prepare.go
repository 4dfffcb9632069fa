package orchestrator

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/hindsearch/hindsearch/clients/judge"
	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/orchestrator/dataset"
	"github.com/hindsearch/hindsearch/orchestrator/doctor"
	"github.com/hindsearch/hindsearch/orchestrator/fleet"
	"github.com/hindsearch/hindsearch/orchestrator/metrics"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/orchestrator/rollout"
	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/results"
)

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
		ru.trainSet = append(ru.trainSet, qs...)
	}
	sets, subset, err := dataset.EvalSetsWithSubset(r)
	if err != nil {
		return err
	}
	ru.evalSet = sets
	// Which questions the evaluations use, by id: eval.subset takes the
	// file back.
	if len(sets) > 0 {
		if err := subset.Write(filepath.Join(ru.dir.Path, results.SubsetFile)); err != nil {
			return fmt.Errorf("record the evaluation subset: %w", err)
		}
	}
	if r.Train.ExcludeEval {
		ru.trainSet, ru.excluded = dataset.Exclude(ru.trainSet, sets)
		if len(ru.trainSet) == 0 && r.Train.Steps > 0 {
			return fmt.Errorf("train.data: every training question is also an evaluation question (train.exclude_eval drops them): point train.data at a training split, or set train.exclude_eval=false")
		}
	}
	prompt := r.Hindsight.Prompt
	if prompt == "" && r.Hindsight.Broadcast == recipes.BroadcastEarliest {
		prompt = DefaultJudgePromptEarliest
	}
	tmpl, err := ParseJudgePrompt(prompt)
	if err != nil {
		return err
	}
	clock := metrics.NewPhases()
	if ru.rollouts, err = rollout.NewEngine(r, ru.Deps, clock); err != nil {
		return err
	}
	ru.rollouts.Metrics = ru.Metrics
	ru.hinter = newHinter(r, ru.Deps.Judge, tmpl, clock)
	evr, _ := rollout.NewEngine(r, ru.Deps, nil)
	evr.Replicas = ru.rollouts.Replicas // one view of the replicas' health
	evr.Metrics = ru.Metrics
	ru.rollouts.Exclusive, evr.Exclusive = ru.scoreGate, ru.scoreGate
	ru.ev = &evaluator{rollouts: evr, datasets: ru.evalSet, concurrency: r.Policy.Concurrency * len(ru.Deps.Policies),
		seed: r.Seed, keep: r.Output.Trajectories, out: ru.Out, progress: ru.Progress}
	if ru.sync, err = fleet.NewSync(r, ru.rollouts.Replicas); err != nil {
		return err
	}
	// A replica that died and came back is re-admitted once it serves the
	// weights in use again.
	ru.rollouts.Replicas.Readmit = func(ctx context.Context, p policy.Policy) error {
		ru.syncMu.Lock()
		defer ru.syncMu.Unlock()
		return ru.sync.Restore(ctx, p)
	}
	return nil
}

func newHinter(r *recipes.Recipe, j judge.Judge, tmpl *template.Template, clock *metrics.Phases) *hinter {
	h := r.Hindsight
	return &hinter{judge: j, prompt: tmpl, maxTokens: r.Judge.MaxTokens, sampling: roles.JudgeSampling(r),
		seed: r.Seed, gold: h.GoldAnswer, redact: h.RedactGold, maxChars: h.MaxCritiqueChars, hint: h.HintTemplate,
		loss: h.Loss, broadcast: h.Broadcast, coef: h.Coef, clamp: h.Clamp, phases: clock,
		siblings: h.Hint == recipes.HintSiblings, siblingsTmpl: h.SiblingsTemplate}
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

// prepare makes the run's state before its first step: the run directory
// (locked; claimed from an earlier run, or its resume point read), the
// resolved recipe saved with its secrets redacted, the trainer-side ledger,
// the questions, the rollout, hindsight, evaluation and sync engines, and
// the preflight checks of every server; then it prints the run's banner.
// unlock releases the directory.
func (rn *Runner) prepare(ctx context.Context) (ru *run, unlock func(), err error) {
	if rn.advantageSign == 0 {
		rn.advantageSign = 1
	}
	if rn.Out == nil {
		rn.Out = io.Discard
	}
	r := rn.Recipe
	if _, err := rn.Deps.LocalTokenizer(); err != nil {
		return nil, nil, err
	}
	dir, lock, err := openRunDir(r.Output.Dir)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			lock.Unlock()
		}
	}()
	var resumed *state
	if rn.Resume {
		if resumed, err = readState(dir); err != nil {
			return nil, nil, err
		}
	} else if err := rn.claim(dir); err != nil {
		return nil, nil, err
	}
	red := r.Redacted()
	if red.Policy.EndpointsFile != "" {
		// The file lists the servers (it was read into policy.urls at
		// load): saved as written, the recipe loads again.
		red.Policy.URLs = []string{}
	}
	y, err := red.YAML()
	if err != nil {
		return nil, nil, fmt.Errorf("save recipe: %w", err)
	}
	if err := dir.WriteFileAtomic("recipe.yaml", y); err != nil {
		return nil, nil, fmt.Errorf("save recipe: %w", err)
	}
	ru = &run{Runner: rn, r: r, dir: dir, sim: len(rn.Deps.Simulated) > 0, adapters: map[int]string{}, samplers: map[string]string{}, resumed: resumed,
		trainer:  boundedTrainer{rn.Deps.Trainer, time.Duration(r.Trainer.CallTimeoutSeconds * float64(time.Second))},
		judgeSem: make(semaphore, max(r.Judge.Concurrency, 1))}
	if r.Hindsight.ScoreConcurrency > 0 {
		ru.scoreSem = make(semaphore, r.Hindsight.ScoreConcurrency)
	}
	if r.Hindsight.ScoreAlone {
		ru.scoreGate = &sync.RWMutex{}
	}
	rn.last = ru
	if ru.ret, err = loadRetention(dir, r.Checkpoint.Keep, r.Trainer.CheckpointsDir); err != nil {
		return nil, nil, err
	}
	if err := ru.startTracking(y); err != nil {
		return nil, nil, err
	}
	// A failure below ends the trackers' runs (the named result ru is
	// nil by then).
	started := ru
	defer func() {
		if err != nil {
			started.closeTracking(false)
		}
	}()
	if ru.prior, err = readTrainerModel(dir); err != nil {
		return nil, nil, err
	}
	if err := ru.load(); err != nil {
		return nil, nil, err
	}
	if err := doctor.Preflight(ctx, r, rn.Deps); err != nil {
		return nil, nil, err
	}
	if ru.backend, err = doctor.TrainerBackend(ctx, r, rn.Deps); err != nil {
		return nil, nil, fmt.Errorf("%w (set trainer.backend to %s, %s or %s)", err, recipes.BackendSkyRLJAX, recipes.BackendSkyRLFSDP, recipes.BackendHosted)
	}
	if ru.sim {
		fmt.Fprintf(rn.Out, "SIMULATED: %s served by the embedded hindsearch simulator, not by language models; results show the control plane at work, not model quality.\n",
			strings.Join(rn.Deps.Simulated, ", "))
	}
	if ru.excluded > 0 {
		fmt.Fprintf(rn.Out, "train.exclude_eval: %d training questions that are also evaluation questions left out of training (%d remain)\n", ru.excluded, len(ru.trainSet))
	}
	// With train.exclude_eval no evaluation question is left to train on.
	if !r.Train.ExcludeEval {
		if w := dataset.Contamination(ru.trainSet, ru.evalSet); w != "" {
			fmt.Fprintf(rn.Out, "WARNING: %s\n", w)
		}
	}
	fmt.Fprintf(rn.Out, "run %s: %d steps x %d questions x %d samples, %s; output %s\n",
		r.Name, r.Train.Steps, r.Train.BatchSize, r.Train.GroupSize, r.Switches(), dir.Path)
	fmt.Fprintf(rn.Out, "training: %s\n", ru.optimisation())
	return ru, lock.Unlock, nil
}
