package orchestrator

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"github.com/hindsearch/hindsearch/clients/judge"
	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/orchestrator/dataset"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
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
