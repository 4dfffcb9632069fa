package orchestrator

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hindsearch/hindsearch/orchestrator/metrics"
	"github.com/hindsearch/hindsearch/orchestrator/rollout"
	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/results"
)

// stepRecord is the step record's rollout part: rewards, turns, searches,
// each phase's busy seconds, the batch digest and the wall time.
func (ru *run) stepRecord(step int, all []*rollout.Trajectory, sent []keyedDatum, clock *metrics.Phases, t0 time.Time) *results.StepRecord {
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
	ph := clock.Seconds()
	rec.PhaseSeconds = map[string]float64{"rollout": ph["rollout"], "judge": ph["judge"], "teacher": ph["teacher"],
		"train": ph["train"], "sync": ph["sync"], "eval": 0}
	if ru.r.Trainer.KLCoef > 0 {
		rec.PhaseSeconds["reference"] = ph["reference"]
	}
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

func (ru *run) printStep(rec *results.StepRecord) {
	ph := rec.PhaseSeconds
	fmt.Fprintf(ru.Out, "step %3d/%d  reward(EM) %.3f  F1 %.3f  failed %d/%d  critiques %d  opd_tokens %d (mean %.3f)  rollout %.1fs judge %.1fs teacher %.1fs train %.1fs sync %.1fs eval %.1fs\n",
		rec.Step, ru.r.Train.Steps, rec.RewardMean, rec.F1Mean, rec.Failed, rec.Trajectories, rec.Critiques, rec.OPDTokens, rec.OPDMean,
		ph["rollout"], ph["judge"], ph["teacher"], ph["train"], ph["sync"], ph["eval"])
	if ru.r.Hindsight.Enabled {
		unnamed := ""
		if ru.r.Hindsight.Broadcast == recipes.BroadcastEarliest {
			unnamed = fmt.Sprintf(", %d critiques named no search (no term)", rec.EarliestUnnamed)
		}
		fmt.Fprintf(ru.Out, "          hindsight: non-zero term on %.1f%% of failed trajectories, mean term on search tokens %.4f%s\n",
			100*rec.OPDFailedShare, rec.OPDSearchMean, unnamed)
	}
	if rec.Health != nil {
		fmt.Fprintln(ru.Out, "          "+results.HealthLine(rec.Health))
	}
}

// caption names the recipe and its ablation switches.
func (ru *run) caption() string {
	c := fmt.Sprintf("EM (%%) by evaluation step. recipe %s: %s. Training: %s. Questions: %s (%s)", ru.r.Name, ru.r.Switches(), ru.r.Optimisation(), ru.r.Eval.Describe(), results.SubsetFile)
	if ru.sim {
		c += ". SIMULATED (" + strings.Join(ru.Deps.Simulated, ", ") + " by the embedded simulator)"
	}
	return c
}

// plotCurves redraws training-curves.png and health-curves.png
// (results.WriteCurves); a failure to draw is reported
// and the run goes on (the records it plots are already written).
func (ru *run) plotCurves() {
	if err := results.WriteCurves(ru.dir); err != nil {
		fmt.Fprintf(ru.Out, "warning: curves not drawn: %v\n", err)
	}
}

// keepTrajectories writes a bounded sample of the step's trajectories, with
// their critiques and OPD terms, to trajectories/step-NNNN.jsonl: whole
// groups in group order, failed-first groups preferred so critiques show.
func (ru *run) keepTrajectories(step int, all []*rollout.Trajectory) error {
	n := ru.r.Output.Trajectories
	if n <= 0 {
		return nil
	}
	picked := append([]*rollout.Trajectory(nil), all...)
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
		t.Pieces = rollout.TokenPieces(ru.rollouts.Tokenizer().Vocab, t)
	}
	if err := writeTrajectories(ru.dir, results.TrajectoriesFile(step), picked); err != nil {
		return fmt.Errorf("keep trajectories: %w", err)
	}
	return pruneTrajectories(filepath.Join(ru.dir.Path, "trajectories"), step, ru.r.Output.TrajectorySteps, ru.r.Eval.Every)
}

// writeTrajectories writes ts, one JSON line each, to name in the run
// directory (atomically).
func writeTrajectories(dir *results.RunDir, name string, ts []*rollout.Trajectory) error {
	var b strings.Builder
	for _, t := range ts {
		line, err := json.Marshal(t)
		if err != nil {
			return err
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return dir.WriteFileAtomic(name, []byte(b.String()))
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
func critiqueMeanChars(all []*rollout.Trajectory) float64 {
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
func hindsightDensity(all []*rollout.Trajectory) (share, searchMean float64) {
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

// record builds a synced step's record (stepRecord, the critiques and the
// hindsight term's density, the trainer's metrics, which weights sampled
// it and how far they lagged) and keeps a sample of its trajectories
// (keepTrajectories). adapter is the name of the weights the step made.
func (ru *run) record(c *collected, adapter string) (*results.StepRecord, error) {
	all := c.trajectories()
	ru.lastTrajs, ru.lastStart = all, c.t0
	rec := ru.stepRecord(c.step, all, c.sent, c.clock, c.t0)
	rec.Critiques, rec.CritiqueFailures = int(c.critiques.Load()), int(c.critiqueFailures.Load())
	rec.EarliestUnnamed = int(c.earliestUnnamed.Load())
	rec.CritiqueMeanChars = critiqueMeanChars(all)
	rec.OPDFailedShare, rec.OPDSearchMean = hindsightDensity(all)
	rec.OPDTokens = int(c.opdTokens.Load())
	if rec.OPDTokens > 0 {
		rec.OPDMean = c.opdSum / float64(rec.OPDTokens)
	}
	rec.Adapter = adapter
	rec.SampledWith = c.model
	rec.PolicyLag = c.step - 1 - versionOf(c.model, ru.r)
	rec.Replicas = c.sampled.Snapshot()
	rec.Affinity = ru.affinityRecord()
	rec.TrainerMetrics = mergeMetrics(c.fb, c.om)
	rec.LearningRate, rec.OptimSteps = c.lr, len(c.om)
	rec.Health = stepHealth(all)
	rec.Health.Filtered, rec.Health.PenalisedTurns = int(c.filtered.Load()), int(c.penalised.Load())
	ru.watchHealth(rec)
	if c.entTokens > 0 {
		rec.Entropy = c.entSum / float64(c.entTokens)
	}
	if c.klTokens > 0 {
		kl := c.klSum / float64(c.klTokens)
		rec.KL = &kl
	}
	if c.termScaleN > 0 {
		rec.OPDTermScale = c.termScaleSum / float64(c.termScaleN)
	}
	rec.OPDTokensClippable = c.opdClippable
	if err := ru.keepTrajectories(c.step, all); err != nil {
		return nil, err
	}
	return rec, nil
}

// versionOf is the step whose weights a model name carries (0: the base).
func versionOf(model string, r *recipes.Recipe) int {
	if m := reStepSuffix.FindStringSubmatch(model); m != nil && model != r.Policy.Model {
		v, _ := strconv.Atoi(m[1])
		return v
	}
	return 0
}

// announce publishes a recorded step: its metrics, its line on Out, and
// the tests' hook.
func (ru *run) announce(rec *results.StepRecord) {
	ru.Metrics.RecordStep(rec)
	ru.printStep(rec)
	if ru.afterStep != nil {
		ru.afterStep(rec.Step)
	}
}

// report ends a run's output: a warning when deleting superseded trainer
// checkpoints failed, then the table of every evaluation.
func (ru *run) report(sum *Summary) error {
	_, failed, left := ru.ret.counts()
	if failed > 0 {
		fmt.Fprintf(ru.Out, "warning: %d deletions of superseded trainer checkpoints failed (%s lists what is left on the trainer)\n", failed, ledgerFile)
	}
	if left > 0 {
		fmt.Fprintf(ru.Out, "warning: %d superseded trainer checkpoints were left on a trainer without the DELETE route (%s lists them)\n", left, ledgerFile)
	}
	if len(sum.Evals) == 0 {
		return nil
	}
	fmt.Fprintln(ru.Out)
	return results.EvalTable(ru.Out, sum.Evals, ru.caption())
}

// affinityRecord is the step's placements of pinned requests: the
// fleet's counters since the previous record; nil when nothing is pinned
// (policy.affinity none, or a router placing the requests).
func (ru *run) affinityRecord() *results.AffinityRecord {
	reps := ru.rollouts.Replicas
	if reps.Routed() || reps.PinKey("t", "g") == "" {
		return nil
	}
	now := reps.AffinityStats()
	was := ru.affinityAt
	ru.affinityAt = now
	return &results.AffinityRecord{Hits: now.Hits - was.Hits, Pinned: now.Pinned - was.Pinned,
		Moved: now.Moved - was.Moved, Lost: now.Lost - was.Lost}
}
