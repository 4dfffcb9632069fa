package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/sourcegraph/conc/pool"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/orchestrator/dataset"
	"github.com/hindsearch/hindsearch/orchestrator/fleet"
	"github.com/hindsearch/hindsearch/orchestrator/metrics"
	"github.com/hindsearch/hindsearch/orchestrator/progress"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/orchestrator/rollout"
	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/results"
)

// evaluator runs greedy evaluation of one model on the eval datasets.
type evaluator struct {
	rollouts    *rollout.Engine
	datasets    map[string][]dataset.Question
	concurrency int
	seed        int64
	// keep is how many trajectories an evaluation keeps for
	// orchestrate show --eval (output.trajectories; 0: none).
	keep int
	out  io.Writer
	// progress shows the evaluation's progress (nil: none).
	progress *progress.Reporter
}

// evalItem is one question of an evaluation.
type evalItem struct {
	ds string
	t  *rollout.Trajectory
}

// evalOutput is what one evaluation records.
type evalOutput struct {
	recs      []results.EvalRecord
	questions []results.QuestionRecord
	// kept are the trajectories kept for orchestrate show --eval
	// (evaluator.keep of them, pieces filled in).
	kept []*rollout.Trajectory
}

// evaluate runs strategy (direct, rag or search) greedily on every dataset
// and returns the per-dataset records, the per-question records and the
// trajectories it keeps.
func (ev *evaluator) evaluate(ctx context.Context, step int, strategy, model string) (*evalOutput, error) {
	names := make([]string, 0, len(ev.datasets))
	for n := range ev.datasets {
		names = append(names, n)
	}
	sort.Strings(names)
	var items []evalItem
	for _, n := range names {
		for i, q := range ev.datasets[n] {
			items = append(items, evalItem{n, &rollout.Trajectory{ID: fmt.Sprintf("eval-%s-%d", n, i), Step: step, Question: q}})
		}
	}
	ev.rollouts.ResetStep(ctx)
	task := ev.progress.Start(fmt.Sprintf("eval step %d (%s)", step, strategy), len(items), "questions")
	p := pool.New().WithContext(ctx).WithCancelOnError().WithFirstError().WithMaxGoroutines(max(ev.concurrency, 1))
	for _, it := range items {
		p.Go(func(ctx context.Context) error {
			defer task.Add(1)
			return ev.one(ctx, it.t, strategy, model)
		})
	}
	err := p.Wait()
	task.Done()
	if err != nil {
		return nil, fmt.Errorf("evaluate %s at step %d: %w", strategy, step, err)
	}
	var recs []results.EvalRecord
	var qrecs []results.QuestionRecord
	all := make([]*rollout.Trajectory, len(items))
	for i, it := range items {
		all[i] = it.t
	}
	for _, n := range names {
		rec := results.EvalRecord{Step: step, Strategy: strategy, Dataset: n}
		var ts []*rollout.Trajectory
		for _, it := range items {
			if it.ds != n {
				continue
			}
			ts = append(ts, it.t)
			rec.N++
			rec.EM += it.t.Reward
			rec.F1 += it.t.F1
			qrecs = append(qrecs, results.QuestionRecord{Step: step, Strategy: strategy, Dataset: n,
				ID: it.t.Question.ID, EM: it.t.Reward, F1: it.t.F1, Answer: it.t.Answer})
		}
		if rec.N > 0 {
			rec.EM /= float64(rec.N)
			rec.F1 /= float64(rec.N)
		}
		if strategy == format.StrategySearch {
			rec.Health = stepHealth(ts)
		}
		recs = append(recs, rec)
	}
	avg := 0.0
	for _, rec := range recs {
		avg += rec.EM
	}
	if len(recs) > 0 {
		avg /= float64(len(recs))
	}
	fmt.Fprintf(ev.out, "eval step %d (%s, %s, greedy): average EM %.1f%% over %d datasets, %d questions\n",
		step, strategy, model, 100*avg, len(recs), len(items))
	if strategy == format.StrategySearch {
		fmt.Fprintf(ev.out, "  eval %s\n", results.HealthLine(stepHealth(all)))
	}
	return &evalOutput{recs: recs, questions: qrecs, kept: ev.pick(all)}, nil
}

// pick chooses the trajectories an evaluation keeps: those with something
// the health line counts against (an invalid or cut turn, a cut
// observation, a failed or repeated search, no answer) first, then the
// wrong answers, then the rest, each in dataset and question order; at
// most ev.keep, with their token pieces.
func (ev *evaluator) pick(all []*rollout.Trajectory) []*rollout.Trajectory {
	picked := pickForReading(all, ev.keep)
	for _, t := range picked {
		t.Pieces = rollout.TokenPieces(ev.rollouts.Tokenizer().Vocab, t)
	}
	return picked
}

// pickForReading is pick's choice, without the pieces.
func pickForReading(all []*rollout.Trajectory, keep int) []*rollout.Trajectory {
	if keep <= 0 {
		return nil
	}
	rank := func(t *rollout.Trajectory) int {
		switch {
		case needsReading(t):
			return 0
		case t.Reward == 0:
			return 1
		}
		return 2
	}
	picked := slices.Clone(all)
	sort.SliceStable(picked, func(i, j int) bool { return rank(picked[i]) < rank(picked[j]) })
	if len(picked) > keep {
		picked = picked[:keep]
	}
	return picked
}

// needsReading says whether a trajectory holds a turn or an ending the
// agent's health counts against it.
func needsReading(t *rollout.Trajectory) bool {
	if !t.Answered {
		return true
	}
	for _, tr := range t.Turns {
		if tr.Action == format.ActionNone || tr.Cut != "" || tr.ObsCut || tr.Repeated || tr.RetrievalError != "" {
			return true
		}
	}
	return false
}

// one answers one question with a strategy, greedily, and scores it.
func (ev *evaluator) one(ctx context.Context, t *rollout.Trajectory, strategy, model string) error {
	greedy := policy.Greedy()
	seed := roles.Seed(ev.seed, -1)
	switch strategy {
	case format.StrategySearch:
		ids, err := ev.rollouts.PromptIDs(ctx, t.Question.Question, "")
		if err != nil {
			return err
		}
		t.PromptIDs = ids
		if err := ev.rollouts.Rollout(ctx, t, model, greedy, seed); err != nil {
			return err
		}
	case format.StrategyDirect, format.StrategyRAG:
		if err := ev.rollouts.Once(ctx, t, strategy, model, greedy, seed); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown strategy %q (want one of %v)", strategy, format.Strategies)
	}
	t.Score()
	return nil
}

// EvalOptions configure a standalone evaluation.
type EvalOptions struct {
	// Strategy is direct, rag or search.
	Strategy string
	// Checkpoint is a model name the policy servers serve, or the path of
	// an adapter directory or sampler archive (.tar.gz) to load on them
	// first. Empty: the base model.
	Checkpoint string
	// Step labels the records; negative: taken from a "-stepNNNN" suffix of
	// the checkpoint's name, else 0.
	Step int
	// Out receives progress and the table.
	Out io.Writer
	// Progress, when set, shows the evaluation's progress; Out should then
	// be its Writer.
	Progress *progress.Reporter
	// Metrics, when set, counts the evaluation's trajectories.
	Metrics *metrics.Metrics
}

var reStepSuffix = regexp.MustCompile(`-step0*(\d+)$`)

// Evaluate runs one greedy evaluation of a model on the recipe's eval
// datasets, appends the records to the run directory (output.dir) and
// prints the seven-column table.
func Evaluate(ctx context.Context, r *recipes.Recipe, deps roles.Deps, opt EvalOptions) ([]results.EvalRecord, error) {
	if opt.Out == nil {
		opt.Out = io.Discard
	}
	if !slices.Contains(format.Strategies, opt.Strategy) {
		return nil, fmt.Errorf("--strategy %q: want one of %s", opt.Strategy, strings.Join(format.Strategies, ", "))
	}
	if _, err := deps.LocalTokenizer(); err != nil {
		return nil, err
	}
	sets, subset, err := dataset.EvalSetsWithSubset(r)
	if err != nil {
		return nil, err
	}
	if len(sets) == 0 {
		return nil, errors.New("eval.datasets: no dataset to evaluate on")
	}
	dir, lock, err := openRunDir(r.Output.Dir)
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	if _, err := os.Stat(filepath.Join(dir.Path, "recipe.yaml")); err != nil {
		red := r.Redacted()
		if y, err := red.YAML(); err == nil {
			if err := dir.WriteFileAtomic("recipe.yaml", y); err != nil {
				return nil, fmt.Errorf("save recipe: %w", err)
			}
		}
	}
	if err := subset.Write(filepath.Join(dir.Path, results.SubsetFile)); err != nil {
		return nil, fmt.Errorf("record the evaluation subset: %w", err)
	}
	model, err := fleet.ServeCheckpoint(ctx, r, deps.Policies, opt.Checkpoint)
	if err != nil {
		return nil, err
	}
	step := opt.Step
	if step < 0 {
		step = 0
		if m := reStepSuffix.FindStringSubmatch(model); m != nil {
			step, _ = strconv.Atoi(m[1])
		} else if m := reStepSuffix.FindStringSubmatch(strings.TrimSuffix(filepath.Base(opt.Checkpoint), ".tar.gz")); opt.Checkpoint != "" && m != nil {
			// Full weights keep the base name: the step is in the path.
			step, _ = strconv.Atoi(m[1])
		}
	}
	rl, err := rollout.NewEngine(r, deps, nil)
	if err != nil {
		return nil, err
	}
	rl.Metrics = opt.Metrics
	ev := &evaluator{rollouts: rl, datasets: sets, concurrency: r.Policy.Concurrency * len(deps.Policies), seed: r.Seed,
		keep: r.Output.Trajectories, out: opt.Out, progress: opt.Progress}
	if len(deps.Simulated) > 0 {
		fmt.Fprintf(opt.Out, "SIMULATED: %s served by the embedded hindsearch simulator, not by language models.\n", strings.Join(deps.Simulated, ", "))
	}
	out, err := ev.evaluate(ctx, step, opt.Strategy, model)
	if err != nil {
		return nil, err
	}
	if err := recordEval(dir, step, opt.Strategy, out); err != nil {
		return nil, err
	}
	recs := out.recs
	caption := fmt.Sprintf("EM (%%) of %s, strategy %s, greedy, step %d. recipe %s. Questions: %s (%s)", model, opt.Strategy, step, r.Name, r.Eval.Describe(), results.SubsetFile)
	if len(deps.Simulated) > 0 {
		caption += ". SIMULATED (" + strings.Join(deps.Simulated, ", ") + " by the embedded simulator)"
	}
	fmt.Fprintln(opt.Out)
	return recs, results.EvalTable(opt.Out, recs, caption)
}

// evaluate runs one greedy evaluation of the current model and appends its
// records to eval.jsonl and questions/.
func (ru *run) evaluate(ctx context.Context, step int, strategy string) ([]results.EvalRecord, error) {
	if err := ru.ensure(ctx, ru.model()); err != nil {
		return nil, fmt.Errorf("evaluate at step %d: %w", step, err)
	}
	out, err := ru.ev.evaluate(ctx, step, strategy, ru.model())
	if err != nil {
		return nil, err
	}
	ru.Metrics.RecordEval(out.recs)
	return out.recs, recordEval(ru.dir, step, strategy, out)
}

// recordEval appends an evaluation's records to the run directory and
// writes the trajectories it kept.
func recordEval(dir *results.RunDir, step int, strategy string, out *evalOutput) error {
	if err := dir.WriteQuestions(step, strategy, out.questions); err != nil {
		return fmt.Errorf("record evaluation: %w", err)
	}
	if len(out.kept) > 0 {
		if err := writeTrajectories(dir, results.EvalTrajectoriesFile(step, strategy), out.kept); err != nil {
			return fmt.Errorf("record evaluation: %w", err)
		}
	}
	for _, rec := range out.recs {
		if err := dir.AppendJSONL("eval.jsonl", rec); err != nil {
			return fmt.Errorf("record evaluation: %w", err)
		}
	}
	return nil
}
