package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/results"
)

// ledgerFile lists, in the run directory, the checkpoints the run saved
// (or began to save) on the trainer and has not deleted yet, under every
// model id the run used (a resumed run trains a new model): what the
// retention rule may delete once superseded, after a resume too.
const ledgerFile = "trainer_checkpoints.json"

// trainerCheckpoint is one checkpoint the run saved on the trainer.
type trainerCheckpoint struct {
	ModelID string `json:"model_id"`
	// ID is the checkpoint's typed id, weights/<name> (a training state)
	// or sampler_weights/<name> (sampler weights).
	ID   string `json:"checkpoint_id"`
	Step int    `json:"step"`
	// Complete marks a training state recorded in state.json: a resume
	// point.
	Complete bool `json:"complete,omitempty"`
}

func (c trainerCheckpoint) state() bool { return strings.HasPrefix(c.ID, "weights/") }

// retention keeps the trainer's disk bounded: the newest keep complete
// states, and the sampler archives still needed, stay; the rest of the
// ledger is deleted through the trainer's DELETE route. A failed delete is
// counted, reported and tried again at the next prune; it never fails the
// run. A trainer without the route (trainer.ErrNoDeleteRoute: skyrl 0.3.0
// from PyPI) is reported once and no delete is sent to it again in this
// process: when the run knows the trainer's checkpoints directory
// (trainer.checkpoints_dir) the checkpoint's files are removed there, in
// SkyRL's layout (its database still lists them); otherwise the ledger
// keeps them for a later run (a resume on a server with the route deletes
// them) and the run's end says how many were left.
type retention struct {
	dir  *results.RunDir
	keep int
	// disk is the trainer's checkpoints directory as this machine sees
	// it (trainer.checkpoints_dir; "": not reachable from here).
	disk string

	mu       sync.Mutex
	held     []trainerCheckpoint
	deleted  int
	failures int
	// noRoute is set once the trainer answered that it has no DELETE
	// route; left counts the superseded checkpoints left on it since.
	noRoute bool
	left    map[string]bool
}

// loadRetention reads the run directory's ledger (none: an empty one).
func loadRetention(dir *results.RunDir, keep int, disk string) (*retention, error) {
	rt := &retention{dir: dir, keep: max(keep, 1), disk: disk}
	b, err := os.ReadFile(filepath.Join(dir.Path, ledgerFile))
	if errors.Is(err, os.ErrNotExist) {
		return rt, nil
	}
	if err == nil {
		err = json.Unmarshal(b, &rt.held)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ledgerFile, err)
	}
	return rt, nil
}

// saveLocked writes the ledger; called with mu held.
func (rt *retention) saveLocked() error {
	b, _ := json.MarshalIndent(rt.held, "", "  ")
	return rt.dir.WriteFileAtomic(ledgerFile, append(b, '\n'))
}

// add records a checkpoint about to be saved (before the save, so that a
// crash during it still leaves it to delete).
func (rt *retention) add(c trainerCheckpoint) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, h := range rt.held {
		if h.ModelID == c.ModelID && h.ID == c.ID {
			return nil
		}
	}
	rt.held = append(rt.held, c)
	return rt.saveLocked()
}

// complete marks the state (modelID, id) of step as a resume point (added
// if the ledger lacks it: a run directory written before the ledger, or a
// crash between state.json and the ledger); states of later steps are not
// resume points (a resumed run repeats those steps).
func (rt *retention) complete(modelID, id string, step int) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	found := false
	for i := range rt.held {
		h := &rt.held[i]
		if h.state() && h.Step > step {
			h.Complete = false
		}
		if h.ModelID == modelID && h.ID == id {
			h.Complete, found = true, true
		}
	}
	if !found {
		rt.held = append(rt.held, trainerCheckpoint{ModelID: modelID, ID: id, Step: step, Complete: true})
	}
	return rt.saveLocked()
}

// prune deletes every held checkpoint that is neither one of the newest
// keep complete states nor a sampler archive that samplerNeeded reports
// needed; it reports failures to out.
func (rt *retention) prune(ctx context.Context, tr trainer.Trainer, samplerNeeded func(modelID, name string) bool, out io.Writer) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	var complete []int
	for i, h := range rt.held {
		if h.state() && h.Complete {
			complete = append(complete, i)
		}
	}
	keepState := map[int]bool{}
	for _, i := range complete[max(len(complete)-rt.keep, 0):] {
		keepState[i] = true
	}
	var kept []trainerCheckpoint
	for i, h := range rt.held {
		needed := keepState[i]
		if name, ok := strings.CutPrefix(h.ID, "sampler_weights/"); ok {
			needed = samplerNeeded(h.ModelID, name)
		}
		if needed {
			kept = append(kept, h)
			continue
		}
		var err error
		if !rt.noRoute {
			err = tr.DeleteCheckpoint(ctx, h.ModelID, h.ID)
		}
		if errors.Is(err, trainer.ErrNoDeleteRoute) {
			rt.noRoute, rt.left = true, map[string]bool{}
			if rt.disk != "" {
				fmt.Fprintf(out, "warning: %v; superseded checkpoints are removed from its disk instead, under %s (its database still lists them)\n", err, rt.disk)
			} else {
				fmt.Fprintf(out, "warning: superseded trainer checkpoints cannot be deleted: %v; they stay on the trainer's disk (%s lists them: set trainer.checkpoints_dir to the trainer's --checkpoints-base, where the run then removes them, delete them there by hand, or run a SkyRL with the route, docs/gpu.md)\n", err, ledgerFile)
			}
		}
		if rt.noRoute {
			if rt.disk == "" {
				rt.left[h.ModelID+"/"+h.ID] = true
				kept = append(kept, h)
				continue
			}
			err = removeCheckpointFiles(rt.disk, h)
		}
		if err != nil {
			rt.failures++
			fmt.Fprintf(out, "warning: trainer checkpoint %s/%s not deleted (tried again at the next step): %v\n", h.ModelID, h.ID, err)
			kept = append(kept, h)
			continue
		}
		rt.deleted++
	}
	rt.held = kept
	if err := rt.saveLocked(); err != nil {
		fmt.Fprintf(out, "warning: %s not written: %v\n", ledgerFile, err)
	}
}

// removeCheckpointFiles removes checkpoint h from the trainer's
// checkpoints directory disk, laid out as SkyRL's engine writes it for
// every backend (engine.py): a state at <model_id>/<name>.tar.gz (a file,
// or a directory on the JAX backend), sampler weights at
// <model_id>/sampler_weights/<name>.tar.gz with the .probe file the JAX
// backend writes beside it. What is already gone is no error.
func removeCheckpointFiles(disk string, h trainerCheckpoint) error {
	kind, name, _ := strings.Cut(h.ID, "/")
	if !trainer.ValidModelID(h.ModelID) || name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return fmt.Errorf("checkpoint %s/%s: not a name to remove from disk", h.ModelID, h.ID)
	}
	p := filepath.Join(disk, h.ModelID, name+".tar.gz")
	if kind == "sampler_weights" {
		p = filepath.Join(disk, h.ModelID, "sampler_weights", name+".tar.gz")
	}
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	if err := os.Remove(p + ".probe"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s.probe: %w", p, err)
	}
	return nil
}

// counts returns the deletions made and failed so far, and the superseded
// checkpoints left on a trainer without the DELETE route.
func (rt *retention) counts() (deleted, failures, left int) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.deleted, rt.failures, len(rt.left)
}

// checkpointRef maps a trainer path to its model id and typed checkpoint
// id: tinker://<id>/weights/<name>, tinker://<id>/sampler_weights/<name>,
// or SkyRL's sampler answer tinker://<id>/<name>.
func checkpointRef(path string) (modelID, id string, ok bool) {
	modelID, kind, name, err := trainer.SplitCheckpointPath(path)
	if err != nil || trainer.CheckCheckpointRef(path, modelID, name) != nil {
		return "", "", false
	}
	return modelID, kind + "/" + name, true
}

// modelFile names, in the run directory, the trainer model the run created
// (written as soon as create_model answers): a later run in the directory
// (--resume, --overwrite, a rerun after a SIGKILL before any saved state)
// releases it first.
const modelFile = "trainer_model.json"

// trainerModel is modelFile's content.
type trainerModel struct {
	ModelID string `json:"model_id"`
	Trainer string `json:"trainer"`
	Created string `json:"created"`
}

// writeTrainerModel records the run's model id in the run directory.
func writeTrainerModel(dir *results.RunDir, modelID, trainerURL string) error {
	b, _ := json.MarshalIndent(trainerModel{ModelID: modelID, Trainer: trainerURL, Created: time.Now().UTC().Format(time.RFC3339)}, "", "  ")
	if err := dir.WriteFileAtomic(modelFile, append(b, '\n')); err != nil {
		return fmt.Errorf("record trainer model: %w", err)
	}
	return nil
}

// readTrainerModel returns the model id modelFile names ("" when none).
func readTrainerModel(dir *results.RunDir) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir.Path, modelFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	var m trainerModel
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", modelFile, err)
	}
	return m.ModelID, nil
}

// supersedeLedger marks every checkpoint of the run directory's ledger as
// no resume point (--overwrite replaces the run that saved them), so the
// next prune deletes them on the trainer.
func supersedeLedger(dir *results.RunDir) error {
	rt, err := loadRetention(dir, 1, "")
	if err != nil {
		return err
	}
	if len(rt.held) == 0 {
		return nil
	}
	for i := range rt.held {
		rt.held[i].Complete = false
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.saveLocked()
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
	// sync.kind tinker's initial weights: sampled until the first steps
	// are past, scored as the teacher all run long with hindsight.teacher
	// initial.
	if ru.initialSampler != "" && match(ru.initialSampler) {
		return ru.lastStep <= ru.r.Train.MaxOffPolicySteps || ru.teacherOnPolicyServers()
	}
	return false
}
