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
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// TrajectoriesDir is the subdirectory of a run directory that holds the
// sampled trajectories of each training step, one file per step.
const TrajectoriesDir = "trajectories"

// TrajectoriesFile returns the name, relative to the run directory, of the
// trajectories kept at step: trajectories/step-NNNN.jsonl (the step
// zero-padded to at least four digits).
func TrajectoriesFile(step int) string {
	return filepath.Join(TrajectoriesDir, fmt.Sprintf("step-%04d.jsonl", step))
}

// EvalTrajectoriesFile returns the name, relative to the run directory, of
// the trajectories an evaluation with strategy kept at step:
// trajectories/eval-<strategy>-step-NNNN.jsonl.
func EvalTrajectoriesFile(step int, strategy string) string {
	return filepath.Join(TrajectoriesDir, fmt.Sprintf("eval-%s-step-%04d.jsonl", strategy, step))
}

// EvalTrajectorySteps returns the steps at which an evaluation with
// strategy kept trajectories, in increasing order.
func (d *RunDir) EvalTrajectorySteps(strategy string) ([]int, error) {
	return d.fileSteps(regexp.MustCompile(`^eval-` + regexp.QuoteMeta(strategy) + `-step-([0-9]+)\.jsonl$`))
}

// ReadEvalTrajectories reads the trajectories an evaluation with strategy
// kept at step, in file order; errors as ReadTrajectories'.
func (d *RunDir) ReadEvalTrajectories(step int, strategy string) ([]TrajectoryRecord, error) {
	path := filepath.Join(d.Path, EvalTrajectoriesFile(step, strategy))
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		steps, serr := d.EvalTrajectorySteps(strategy)
		if serr != nil {
			return nil, serr
		}
		if len(steps) == 0 {
			return nil, fmt.Errorf("%s: %w of a %s evaluation (none kept: output.trajectories 0, or no %s evaluation ran)", d.Path, ErrNoTrajectories, strategy, strategy)
		}
		return nil, fmt.Errorf("%s: %w of a %s evaluation at step %d (steps with them: %s)", d.Path, ErrNoTrajectories, strategy, step, StepRanges(steps))
	}
	if err != nil {
		return nil, fmt.Errorf("trajectories: %w", err)
	}
	defer f.Close()
	return readTrajectories(f, path)
}

// TrajectoryQuestion is the question a trajectory answered.
type TrajectoryQuestion struct {
	// ID is the dataset's id of the question.
	ID string `json:"id"`
	// Question is the question text.
	Question string `json:"question"`
	// Golds are the gold answers.
	Golds []string `json:"golden_answers"`
	// Dataset names the dataset the question came from.
	Dataset string `json:"dataset"`
}

// TurnRecord is one policy turn of a trajectory.
type TurnRecord struct {
	// Text is the policy's text for the turn.
	Text string `json:"text"`
	// Action is "search", "answer" or "" (an invalid turn).
	Action string `json:"action"`
	// Content is the query of a search or the answer.
	Content string `json:"content,omitempty"`
	// Titles are the titles of the passages a search retrieved.
	Titles []string `json:"titles,omitempty"`
	// Finish is the policy's finish reason for the turn.
	Finish string `json:"finish"`
	// From and To bound the turn's policy tokens in Tokens: [From, To)
	// (both 0 in records written before they existed).
	From int `json:"from"`
	To   int `json:"to"`
	// ThinkTokens counts the turn's tokens inside <think>...</think>.
	ThinkTokens int `json:"think_tokens,omitempty"`
	// Repeated says the turn's search repeats an earlier one of the
	// trajectory.
	Repeated bool `json:"repeated,omitempty"`
	// Cut says the turn was stopped at its token cap: "turn_tokens" or
	// "context".
	Cut string `json:"cut,omitempty"`
	// ObsCut says the <information> block after the turn was cut at
	// rollout.max_obs_tokens.
	ObsCut bool `json:"obs_cut,omitempty"`
	// RetrievalError is why the turn's search got no passages.
	RetrievalError string `json:"retrieval_error,omitempty"`
	// GoldRetrieved says the passages the turn's search showed the policy
	// (before a cut) contain a gold answer (Health.GoldRetrievedRate).
	GoldRetrieved bool `json:"gold_retrieved,omitempty"`
}

// TrajectoryRecord is one line of trajectories/step-NNNN.jsonl: one rollout
// with its tokens, what was made of it, its critique and its per-token OPD
// terms. It mirrors the JSON the orchestrator writes for a trajectory. The
// per-token slices (Policy, Search, Logprobs, OPD, Pieces) run parallel to
// Tokens; OPD and Pieces may be absent.
type TrajectoryRecord struct {
	// ID identifies the trajectory within the run.
	ID string `json:"id"`
	// Step is the training step that rolled it out.
	Step int `json:"step"`
	// Group is the question's index within the step's batch.
	Group int `json:"group"`
	// Sample is the trajectory's index within its group.
	Sample int `json:"sample"`
	// Question is the question answered.
	Question TrajectoryQuestion `json:"question"`
	// Model names the policy model that sampled it.
	Model string `json:"model"`
	// PromptIDs are the chat-templated prompt's token ids.
	PromptIDs []int `json:"prompt_ids"`
	// Tokens are the response token ids, policy and environment.
	Tokens []int `json:"tokens"`
	// Policy[i] is true for tokens the policy sampled.
	Policy []bool `json:"policy"`
	// Search[i] is true for policy tokens inside <search>...</search>.
	Search []bool `json:"search"`
	// Logprobs are the sampling logprobs (0 for environment tokens).
	Logprobs []float64 `json:"logprobs"`
	// Turns are the policy's turns, in order, each with the span of its
	// policy tokens in Tokens.
	Turns []TurnRecord `json:"turns"`
	// Response is the whole response text (policy and environment).
	Response string `json:"response"`
	// Answer is the final answer ("" when none was given).
	Answer string `json:"answer"`
	// Answered is true when the trajectory ended with an answer.
	Answered bool `json:"answered"`
	// Finish says how the trajectory ended: answer, max_turns, context.
	Finish string `json:"finish"`
	// Reward is the trajectory's reward; 0 counts as failed.
	Reward float64 `json:"reward"`
	// F1 is the answer's token F1 against the gold answers.
	F1 float64 `json:"f1"`
	// Advantage is the group advantage given to every policy token.
	Advantage float64 `json:"advantage"`
	// Critique is the judge's critique (failed trajectories only).
	Critique string `json:"critique,omitempty"`
	// HintFrom is "siblings" when Critique is the judge-free siblings hint
	// (hindsight.hint siblings), empty for a judge's critique.
	HintFrom string `json:"hint_from,omitempty"`
	// FirstWrongSearch is the search (1-based) the critique's first line
	// names as the first that went wrong, under hindsight.broadcast
	// earliest (0: none named).
	FirstWrongSearch int `json:"first_wrong_search,omitempty"`
	// CritiqueError says why no critique was used.
	CritiqueError string `json:"critique_error,omitempty"`
	// OPD is the per-token on-policy-distillation term (nil without one).
	OPD []float64 `json:"opd,omitempty"`
	// Pieces is the decoded text of each token, "" for environment tokens
	// (nil when the record predates it).
	Pieces []string `json:"pieces,omitempty"`
}

// Failed reports whether the trajectory failed (reward 0 or below): the
// trajectories that get critiques.
func (t *TrajectoryRecord) Failed() bool { return t.Reward <= 0 }

// PolicySpans returns the [start, end) token ranges of the contiguous runs
// of policy tokens, in order: span i holds the tokens of turn i.
func (t *TrajectoryRecord) PolicySpans() [][2]int {
	var spans [][2]int
	start := -1
	for i, p := range t.Policy {
		switch {
		case p && start < 0:
			start = i
		case !p && start >= 0:
			spans = append(spans, [2]int{start, i})
			start = -1
		}
	}
	if start >= 0 {
		spans = append(spans, [2]int{start, len(t.Policy)})
	}
	return spans
}

// check verifies the per-token slices run parallel to Tokens.
func (t *TrajectoryRecord) check() error {
	n := len(t.Tokens)
	for _, f := range []struct {
		name     string
		len      int
		optional bool
	}{
		{"policy", len(t.Policy), false},
		{"search", len(t.Search), false},
		{"logprobs", len(t.Logprobs), true},
		{"opd", len(t.OPD), true},
		{"pieces", len(t.Pieces), true},
	} {
		if f.len != n && !(f.optional && f.len == 0) {
			return fmt.Errorf("trajectory %q: %d %s values for %d tokens", t.ID, f.len, f.name, n)
		}
	}
	return nil
}

// stepFileRE matches the name of a step's trajectories file.
var stepFileRE = regexp.MustCompile(`^step-([0-9]+)\.jsonl$`)

// TrajectorySteps returns the steps that have a trajectories file, in
// increasing order (none when the directory has no trajectories/).
func (d *RunDir) TrajectorySteps() ([]int, error) { return d.fileSteps(stepFileRE) }

// fileSteps returns the steps (re's first group) of the files in
// trajectories/ whose names re matches, in increasing order.
func (d *RunDir) fileSteps(re *regexp.Regexp) ([]int, error) {
	entries, err := os.ReadDir(filepath.Join(d.Path, TrajectoriesDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("trajectories: %w", err)
	}
	var steps []int
	for _, e := range entries {
		m := re.FindStringSubmatch(e.Name())
		if m == nil || e.IsDir() {
			continue
		}
		n, err := strconv.Atoi(m[1])
		if err != nil {
			continue // too many digits for an int: not a step file
		}
		if !slices.Contains(steps, n) {
			steps = append(steps, n)
		}
	}
	slices.Sort(steps)
	return steps, nil
}

// ErrNoTrajectories is wrapped by ReadTrajectories when the step has no
// trajectories file.
var ErrNoTrajectories = errors.New("no trajectories")

// ReadTrajectories reads the trajectories kept at step, in file order.
// A step without a file is an error wrapping ErrNoTrajectories that lists
// the steps that have one; a line that does not decode, or whose per-token
// fields are not as long as its tokens, is an error naming the file and
// line.
func (d *RunDir) ReadTrajectories(step int) ([]TrajectoryRecord, error) {
	path := filepath.Join(d.Path, TrajectoriesFile(step))
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		steps, serr := d.TrajectorySteps()
		if serr != nil {
			return nil, serr
		}
		if len(steps) == 0 {
			return nil, fmt.Errorf("%s: %w for step %d (the run kept none: output.trajectories 0, or no step has finished)", d.Path, ErrNoTrajectories, step)
		}
		return nil, fmt.Errorf("%s: %w for step %d (steps with trajectories: %s)", d.Path, ErrNoTrajectories, step, StepRanges(steps))
	}
	if err != nil {
		return nil, fmt.Errorf("trajectories: %w", err)
	}
	defer f.Close()
	return readTrajectories(f, path)
}

// readTrajectories decodes one TrajectoryRecord per non-blank line of r;
// name is the file named in errors.
func readTrajectories(r io.Reader, name string) ([]TrajectoryRecord, error) {
	var out []TrajectoryRecord
	br := bufio.NewReader(r)
	for n := 1; ; n++ {
		line, rerr := br.ReadBytes('\n')
		if rerr != nil && rerr != io.EOF {
			return nil, fmt.Errorf("%s:%d: %w", name, n, rerr)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			var t TrajectoryRecord
			if err := json.Unmarshal(line, &t); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", name, n, err)
			}
			if err := t.check(); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", name, n, err)
			}
			out = append(out, t)
		}
		if rerr == io.EOF {
			return out, nil
		}
	}
}

// StepRanges writes sorted steps compactly: runs of consecutive steps as
// "first-last", e.g. "1-4, 8, 10-11".
func StepRanges(steps []int) string {
	var parts []string
	for i := 0; i < len(steps); {
		j := i
		for j+1 < len(steps) && steps[j+1] == steps[j]+1 {
			j++
		}
		switch {
		case j == i:
			parts = append(parts, strconv.Itoa(steps[i]))
		case j == i+1:
			parts = append(parts, strconv.Itoa(steps[i]), strconv.Itoa(steps[j]))
		default:
			parts = append(parts, fmt.Sprintf("%d-%d", steps[i], steps[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}
