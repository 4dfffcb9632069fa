// Package results owns a run's output directory (DESIGN.md §6): the records
// appended to steps.jsonl and eval.jsonl, crash-safe file writes, and the
// summary tables printed from those records.
package results

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// File names of the JSONL logs inside a run directory.
const (
	// EvalFile holds one EvalRecord per line.
	EvalFile = "eval.jsonl"
	// StepsFile holds one StepRecord per line.
	StepsFile = "steps.jsonl"
)

// EvalRecord is one line of eval.jsonl: the score of one strategy on one
// dataset at one evaluation step. EM and F1 are fractions in [0, 1].
type EvalRecord struct {
	// Step is the training step the evaluated weights come from.
	Step int `json:"step"`
	// Strategy names the evaluation method (e.g. "greedy").
	Strategy string `json:"strategy"`
	// Dataset is the benchmark name (e.g. "nq", "hotpotqa").
	Dataset string `json:"dataset"`
	// N is the number of questions evaluated.
	N int `json:"n"`
	// EM is the exact-match rate.
	EM float64 `json:"em"`
	// F1 is the mean token F1.
	F1 float64 `json:"f1"`
	// Health is the search agent's health over the dataset's questions
	// (Health says what each figure is; the collapse alarm, the filter and
	// the turn penalty are training's and stay empty here): for the search
	// strategy only, nil for direct and rag and in records written before
	// it existed. At step 0 it is the base model's, before any training.
	Health *Health `json:"health,omitempty"`
}

// AffinityRecord counts the placements of pinned policy requests (a
// trajectory's turns and its rescoring under policy.affinity) over a
// step: the step's rollouts and any evaluation since the step before.
type AffinityRecord struct {
	// Hits went to the replica their key was pinned to.
	Hits int64 `json:"hits"`
	// Pinned pinned a key for the first time.
	Pinned int64 `json:"pinned"`
	// Moved re-pinned a key: its replica had policy.affinity_margin more
	// requests in flight than the least-loaded.
	Moved int64 `json:"moved"`
	// Lost re-pinned a key: its replica was down, removed or lacked the
	// request's weights.
	Lost int64 `json:"lost"`
}

// StepRecord is one line of steps.jsonl: the statistics of one training step.
type StepRecord struct {
	// Step is the training step number.
	Step int `json:"step"`
	// RewardMean is the mean trajectory reward.
	RewardMean float64 `json:"reward_mean"`
	// EMMean is the mean exact match of the trajectories.
	EMMean float64 `json:"em_mean"`
	// F1Mean is the mean token F1 of the trajectories.
	F1Mean float64 `json:"f1_mean"`
	// Trajectories is the number of trajectories rolled out.
	Trajectories int `json:"trajectories"`
	// Failed is the number of trajectories that failed.
	Failed int `json:"failed"`
	// Critiques is the number of judge critiques obtained.
	Critiques int `json:"critiques"`
	// CritiqueFailures is the number of judge calls that failed.
	CritiqueFailures int `json:"critique_failures"`
	// CritiqueMeanChars is the mean length of the step's critiques in
	// characters (Unicode code points); 0 when the step had no critiques or
	// did not record it (records written before the field existed).
	CritiqueMeanChars float64 `json:"critique_mean_chars,omitempty"`
	// OPDTokens is the number of tokens given an on-policy distillation
	// signal.
	OPDTokens int `json:"opd_tokens"`
	// OPDMean is the mean on-policy distillation advantage per token.
	OPDMean float64 `json:"opd_mean"`
	// OPDFailedShare is the share (0 to 1) of the step's failed
	// trajectories (reward 0) whose hindsight term is non-zero on at least
	// one token; absent when 0.
	OPDFailedShare float64 `json:"opd_failed_share,omitempty"`
	// OPDSearchMean is the mean hindsight term over the search tokens of
	// the failed trajectories that were given a term, zeros included;
	// absent when 0.
	OPDSearchMean float64 `json:"opd_search_mean,omitempty"`
	// Rescores is the number of the step's failed trajectories whose
	// student tokens were scored again by the prefill route for the OPD
	// term (hindsight.student_logprobs rescored; their time is
	// PhaseSeconds["rescore"]); absent when 0.
	Rescores int `json:"rescores,omitempty"`
	// MeanTurns is the mean number of turns per trajectory.
	MeanTurns float64 `json:"mean_turns"`
	// MeanSearches is the mean number of searches per trajectory.
	MeanSearches float64 `json:"mean_searches"`
	// PhaseSeconds is the wall time of each phase of the step (rollout,
	// judge, teacher, train, sync, eval; rescore with
	// hindsight.student_logprobs rescored; reference with
	// trainer.kl_coef).
	PhaseSeconds map[string]float64 `json:"phase_seconds"`
	// BatchDigest is the sha256 over the exact datums sent to the trainer
	// that step, in canonical (group, sample) order, their advantages
	// scaled for the loss aggregation as sent.
	BatchDigest string `json:"batch_digest"`
	// LearningRate is the step's scheduled learning rate, the one every
	// optim_step of the step sent (trainer.lr_warmup_steps).
	LearningRate float64 `json:"learning_rate,omitempty"`
	// OptimSteps is the number of optim_steps the step made (one per
	// mini-batch, trainer.mini_batch_size).
	OptimSteps int `json:"optim_steps,omitempty"`
	// KL is the mean over the step's policy tokens of the k3 estimate of
	// the KL to the reference (trainer.kl_coef; absent without it).
	KL *float64 `json:"kl,omitempty"`
	// EarliestUnnamed counts, under hindsight.broadcast earliest, the
	// critiques that named no search of their trajectory ("Step N" missing
	// or out of range): no term for them; they are among
	// CritiqueFailures.
	EarliestUnnamed int `json:"earliest_unnamed,omitempty"`
	// OPDTermScale is, under hindsight.term_agg search-mean, the mean over
	// the step's mini-batches of their policy tokens over their term
	// tokens (the failed trajectories' search tokens): with
	// trainer.loss_agg token-mean a term token weighs coef times this
	// against a policy-loss token, the coefficient hindsight.coef amounts
	// to in the advantage route (absent otherwise).
	OPDTermScale float64 `json:"opd_term_scale,omitempty"`
	// OPDTokensClippable is the number of OPD tokens trained, under
	// trainer.loss ppo, where the importance ratio is not 1 by
	// construction (the step's mini-batches after its first, or all under
	// train.max_off_policy_steps): the term rides the advantage into PPO's
	// clipped objective there, which may zero its gradient; the paper's
	// L_OPD is not clipped.
	OPDTokensClippable int `json:"opd_tokens_clippable,omitempty"`
	// Entropy is the mean over the step's policy tokens of the sampled
	// tokens' surprisal (-logprob), an estimate of the policy's entropy.
	Entropy float64 `json:"entropy,omitempty"`
	// Adapter names the weights the step produced.
	Adapter string `json:"adapter"`
	// SampledWith names the policy model the step's rollouts sampled from.
	SampledWith string `json:"sampled_with"`
	// PolicyLag is how many optimiser steps the sampling weights were
	// behind the trainer's (0: on-policy).
	PolicyLag int `json:"policy_lag"`
	// Replicas maps each policy replica's URL to the weights it sampled
	// the step's rollouts with; a replica that sampled nothing (drained,
	// or lacking the weights) is absent.
	Replicas map[string]string `json:"replicas,omitempty"`
	// Affinity counts how the pinned policy requests were placed since
	// the previous step's record (policy.affinity; absent with affinity
	// none, behind a router, or before it existed).
	Affinity *AffinityRecord `json:"affinity,omitempty"`
	// Health is the search agent's health over the step's trajectories
	// (absent in records written before it existed).
	Health *Health `json:"health,omitempty"`
	// TrainerMetrics are the metrics the trainer reported, if any.
	TrainerMetrics map[string]float64 `json:"trainer_metrics,omitempty"`
	// WallSeconds is the wall time of the whole step.
	WallSeconds float64 `json:"wall_seconds"`
	// Simulated is true when the step ran against the embedded simulator.
	Simulated bool `json:"simulated"`
}

// RunDir is a run's output directory, runs/<name>/.
type RunDir struct {
	// Path is the directory.
	Path string
}

// Create makes the run directory (and its parents) if needed and returns it.
func Create(path string) (*RunDir, error) {
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, fmt.Errorf("create run dir: %w", err)
	}
	return &RunDir{Path: path}, nil
}

// file resolves name, which must be a local path, inside the run directory.
func (d *RunDir) file(name string) (string, error) {
	if !filepath.IsLocal(name) {
		return "", fmt.Errorf("run dir: %q is not a local file name", name)
	}
	return filepath.Join(d.Path, name), nil
}

// WriteFileAtomic replaces the file name (relative to the run directory)
// with data: it writes a temporary file in the same directory, syncs it and
// renames it over the target, then syncs the directory. Readers see either
// the old or the new content, never a mixture, even across a crash.
func (d *RunDir) WriteFileAtomic(name string, data []byte) (err error) {
	path, err := d.file(name)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err = f.Chmod(0o644); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	syncDir(dir)
	return nil
}

// syncDir makes a rename in dir durable; best effort (not every platform
// can sync a directory).
func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		_ = f.Sync()
		f.Close()
	}
}

// AppendJSONL appends v, encoded as one line of JSON, to the file name
// (relative to the run directory), creating it if needed.
//
// The whole line, newline included, goes out in a single write(2) on a
// descriptor opened with O_APPEND, followed by fsync: concurrent appenders
// on a local file system do not interleave, and earlier lines are never
// rewritten. A crash can at worst leave the last line torn (no trailing
// newline); the next append then starts on a fresh line, and the readers
// skip such a torn final line.
func (d *RunDir) AppendJSONL(name string, v any) error {
	path, err := d.file(name)
	if err != nil {
		return err
	}
	line, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("append %s: %w", name, err)
	}
	line = append(line, '\n')
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("append %s: %w", name, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, st.Size()-1); err == nil && last[0] != '\n' {
			line = append([]byte{'\n'}, line...)
		}
	}
	if _, err := f.Write(line); err != nil {
		return fmt.Errorf("append %s: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("append %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("append %s: %w", name, err)
	}
	return nil
}

// ReadEval reads eval.jsonl. A missing file reads as no records.
func (d *RunDir) ReadEval() ([]EvalRecord, error) {
	return readJSONL[EvalRecord](filepath.Join(d.Path, EvalFile))
}

// SavedStep is the step of the run's last saved state (state.json's
// "step"), 0 when there is none yet or it does not read: what a --resume
// would continue after. Tools that watch a run from outside (chaos, the
// real-server tests) poll it.
func (d *RunDir) SavedStep() int {
	b, err := os.ReadFile(filepath.Join(d.Path, "state.json"))
	if err != nil {
		return 0
	}
	var st struct {
		Step int `json:"step"`
	}
	if json.Unmarshal(b, &st) != nil {
		return 0
	}
	return st.Step
}

// ReadSteps reads steps.jsonl. A missing file reads as no records.
func (d *RunDir) ReadSteps() ([]StepRecord, error) {
	return readJSONL[StepRecord](filepath.Join(d.Path, StepsFile))
}

// readJSONL decodes one T per non-blank line of path. A bad line is an
// error naming path:line, except a final line without its newline that does
// not decode: that is an append torn by a crash, and is skipped.
func readJSONL[T any](path string) ([]T, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read jsonl: %w", err)
	}
	defer f.Close()
	var out []T
	r := bufio.NewReader(f)
	for n := 1; ; n++ {
		line, rerr := r.ReadBytes('\n')
		if rerr != nil && rerr != io.EOF {
			return nil, fmt.Errorf("%s:%d: %w", path, n, rerr)
		}
		torn := rerr == io.EOF
		if len(bytes.TrimSpace(line)) > 0 {
			var v T
			if err := json.Unmarshal(line, &v); err != nil {
				if torn {
					break
				}
				return nil, fmt.Errorf("%s:%d: %w", path, n, err)
			}
			out = append(out, v)
		}
		if rerr == io.EOF {
			break
		}
	}
	return out, nil
}
