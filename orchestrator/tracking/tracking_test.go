package tracking

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/results"
)

// A step record's numbers become tracker keys: nested paths joined by
// '/', characters MLflow refuses as '_', alarms as flags, evaluations per
// strategy and dataset with their average; strings, the step and
// booleans are left out.
func TestScalarsKeys(t *testing.T) {
	rec := &results.StepRecord{Step: 4, RewardMean: 0.25, BatchDigest: "abc", Simulated: true,
		PhaseSeconds:   map[string]float64{"rollout": 1.5},
		TrainerMetrics: map[string]float64{"forward_backward/loss:sum": -0.1},
		Health: &results.Health{ThinkTokens: 12, Truncated: map[string]float64{"context": 0.1},
			Alarms: []results.HealthAlarm{{Metric: "think_tokens", Fall: 0.6}}}}
	evals := []results.EvalRecord{{Step: 4, Strategy: "search", Dataset: "nq", N: 10, EM: 0.2, F1: 0.3},
		{Step: 4, Strategy: "search", Dataset: "hotpotqa", N: 30, EM: 0.4, F1: 0.5}}
	got := Scalars(rec, evals)
	for k, v := range map[string]float64{"reward_mean": 0.25, "phase_seconds/rollout": 1.5, "trainer_metrics/forward_backward/loss_sum": -0.1,
		"health/think_tokens": 12, "health/truncated/context": 0.1, "health/alarms/think_tokens": 1,
		"eval/search/nq/em": 0.2, "eval/search/hotpotqa/f1": 0.5} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if avg := got["eval/search/avg/em"]; avg < 0.2 || avg > 0.4 {
		t.Errorf("eval/search/avg/em %v", avg)
	}
	for _, k := range []string{"step", "batch_digest", "simulated"} {
		if _, ok := got[k]; ok {
			t.Errorf("%s kept", k)
		}
	}
}

// The recipe's params: dotted keys, strings for MLflow, typed values for
// W&B, variants kept whole.
func TestParamsAndConfig(t *testing.T) {
	y := []byte("name: x\ntrain:\n  steps: 6\n  data: [a.jsonl, b.jsonl]\nvariants:\n  v1: [a=b]\n")
	ps, err := Params(y)
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{{"name", "x"}, {"train.data", `["a.jsonl","b.jsonl"]`}, {"train.steps", "6"}, {"variants", `{"v1":["a=b"]}`}}
	if len(ps) != len(want) {
		t.Fatalf("params %v", ps)
	}
	for i := range want {
		if ps[i] != want[i] {
			t.Errorf("param %d %v, want %v", i, ps[i], want[i])
		}
	}
	cfg, err := RunConfig(y)
	if err != nil {
		t.Fatal(err)
	}
	if cfg["train.steps"] != 6 || len(cfg["train.data"].([]any)) != 2 {
		t.Errorf("config %v", cfg)
	}
}

// slowSink takes its steps only when its context ends.
type slowSink struct{}

func (slowSink) name() string                                   { return "slow" }
func (slowSink) open(context.Context) error                     { return nil }
func (slowSink) files(context.Context, map[string][]byte) error { return nil }
func (slowSink) finish(context.Context, bool) error             { return nil }
func (slowSink) where() string                                  { return "nowhere" }
func (slowSink) step(ctx context.Context, _ Step) error         { <-ctx.Done(); return ctx.Err() }

// A tracker still on a call when the flush time runs out (no error yet)
// is reported as such, and Close returns.
func TestCloseWhileATrackerWorks(t *testing.T) {
	h := start([]sink{slowSink{}}, nil, io.Discard, nil)
	h.Step(Step{Step: 1})
	lines := h.Close(true, 50*time.Millisecond)
	if len(lines) != 1 || !strings.Contains(lines[0], "0 steps taken, 1 not (still working when tracking.flush_seconds ran out)") {
		t.Errorf("lines %q", lines)
	}
}
