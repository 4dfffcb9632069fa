package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/hindsearch/hindsearch/results"
)

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

// ResumePoint is the last completed step the run in directory dir can
// resume from (its state.json, written after each checkpoint): ok is false
// when dir holds none (a new directory, or a run stopped before its first
// checkpoint). A step equal to the recipe's train.steps is a finished run.
func ResumePoint(dir string) (step int, ok bool, err error) {
	st, err := readState(&results.RunDir{Path: dir})
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	return st.Step, true, nil
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
	for _, rec := range keptSteps {
		if rec.Health != nil {
			ru.healthPast = append(ru.healthPast, results.HealthPoint{Step: rec.Step, Health: rec.Health})
		}
	}
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
	if err := ru.sync.Resume(ctx, names, st.Samplers); err != nil {
		return fmt.Errorf("--resume: %w", err)
	}
	for _, v := range vs {
		name := st.Adapters[v]
		ru.adapters[v], ru.samplers[name] = name, st.Samplers[name]
	}
	if err := ru.resumeSessions(ctx, names); err != nil {
		return fmt.Errorf("--resume: %w", err)
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
