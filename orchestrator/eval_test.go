package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/orchestrator/rollout"
	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/results"
)

// Each strategy prints the seven-column table and appends its records, with
// the strategy named, to the run directory.
func TestEvaluateStrategies(t *testing.T) {
	r := testRecipe(t, "")
	data := dataDir + "/qa/"
	r.Eval.Datasets = map[string]string{}
	for _, n := range []string{"nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle"} {
		r.Eval.Datasets[n] = data + n + ".jsonl"
	}
	r.Eval.PerDataset = 6
	deps, emb, err := setup.Connect(context.Background(), r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	for _, s := range []string{"direct", "rag", "search"} {
		var out bytes.Buffer
		recs, err := Evaluate(context.Background(), r, deps, EvalOptions{Strategy: s, Step: -1, Out: &out})
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if len(recs) != 7 {
			t.Fatalf("%s: %d records", s, len(recs))
		}
		for _, want := range []string{"NQ", "TriviaQA", "PopQA", "HotpotQA", "2Wiki", "MuSiQue", "Bamboogle", "avg", "| " + s, "SIMULATED"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: output lacks %q:\n%s", s, want, out.String())
			}
		}
	}
	rd := &results.RunDir{Path: r.Output.Dir}
	evals, err := rd.ReadEval()
	if err != nil || len(evals) != 21 {
		t.Fatalf("eval.jsonl: %v, %d records", err, len(evals))
	}
	for _, s := range []string{"direct", "rag", "search"} {
		qs, err := rd.ReadQuestions(0, s)
		if err != nil || len(qs) != 42 {
			t.Errorf("questions of %s: %v, %d", s, err, len(qs))
		}
	}
	// Unknown strategy and unknown checkpoint are clear errors.
	if _, err := Evaluate(context.Background(), r, deps, EvalOptions{Strategy: "oracle"}); err == nil || !strings.Contains(err.Error(), "direct, rag, search") {
		t.Errorf("unknown strategy: %v", err)
	}
	if _, err := Evaluate(context.Background(), r, deps, EvalOptions{Strategy: "search", Checkpoint: "no-such-model"}); err == nil || !strings.Contains(err.Error(), "no-such-model") {
		t.Errorf("unknown checkpoint: %v", err)
	}
}

// A search evaluation records the agent's health per dataset and prints it
// over all questions; what the agent did after a cut <information> block
// follows the simulated agent's behaviour there. direct and rag record none.
func TestEvaluateSearchHealth(t *testing.T) {
	for _, c := range []struct {
		stopRate float64
		kind     string
	}{{0, results.AfterCutClosed}, {1, results.AfterCutStopped}} {
		r := testRecipe(t, "")
		r.Eval.Datasets = map[string]string{"nq": dataDir + "/qa/nq.jsonl", "hotpotqa": dataDir + "/qa/hotpotqa.jsonl"}
		r.Eval.PerDataset = 8
		r.Rollout.MaxObsTokens = 24 // every block cut
		r.Sim.Agent.CutStopRate = c.stopRate
		deps, emb, err := setup.Connect(context.Background(), r, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer emb.Close()
		var out bytes.Buffer
		recs, err := Evaluate(context.Background(), r, deps, EvalOptions{Strategy: "search", Step: -1, Out: &out})
		if err != nil {
			t.Fatal(err)
		}
		cuts := 0
		for _, rec := range recs {
			h := rec.Health
			if h == nil {
				t.Fatalf("stop rate %v: %s has no health", c.stopRate, rec.Dataset)
			}
			if h.SearchesPerTrajectory == 0 || h.Truncated[results.TruncObservation] == 0 || h.AfterCut == nil {
				t.Fatalf("stop rate %v: %s: no cut searches: %+v", c.stopRate, rec.Dataset, h)
			}
			a := h.AfterCut
			got := map[string]float64{results.AfterCutClosed: a.Closed, results.AfterCutWroteOn: a.WroteOn, results.AfterCutStopped: a.Stopped, results.AfterCutOther: a.Other}
			if got[c.kind] != 1 {
				t.Errorf("stop rate %v: %s: after a cut %+v, want all %s", c.stopRate, rec.Dataset, a, c.kind)
			}
			cuts += a.Turns
		}
		if !strings.Contains(out.String(), "  eval health: searches ") || !strings.Contains(out.String(), fmt.Sprintf("after a cut (%d turns)", cuts)) {
			t.Errorf("stop rate %v: no eval health line over the %d turns after a cut:\n%s", c.stopRate, cuts, out.String())
		}
		for _, s := range []string{"direct", "rag"} {
			recs, err := Evaluate(context.Background(), r, deps, EvalOptions{Strategy: s, Step: -1, Out: &out})
			if err != nil {
				t.Fatal(err)
			}
			for _, rec := range recs {
				if rec.Health != nil {
					t.Errorf("%s: %s records health %+v", s, rec.Dataset, rec.Health)
				}
			}
		}
	}
}

// An evaluation keeps the trajectories the health counts against first,
// then wrong answers, then the rest, each in their order.
func TestPickForReading(t *testing.T) {
	ok := func(id string, reward float64) *rollout.Trajectory {
		return &rollout.Trajectory{ID: id, Answered: true, Reward: reward, Turns: []rollout.Turn{{Action: format.ActionAnswer}}}
	}
	right1, wrong, right2 := ok("right1", 1), ok("wrong", 0), ok("right2", 1)
	cut := ok("cut", 1)
	cut.Turns = append([]rollout.Turn{{Action: format.ActionSearch, ObsCut: true}}, cut.Turns...)
	invalid := ok("invalid", 0)
	invalid.Turns[0].Action = format.ActionNone
	unanswered := ok("unanswered", 0)
	unanswered.Answered = false
	all := []*rollout.Trajectory{right1, wrong, cut, right2, invalid, unanswered}
	var got []string
	for _, tr := range pickForReading(all, 5) {
		got = append(got, tr.ID)
	}
	if want := []string{"cut", "invalid", "unanswered", "wrong", "right1"}; !slices.Equal(got, want) {
		t.Errorf("picked %v, want %v", got, want)
	}
	if got := pickForReading(all, 0); got != nil {
		t.Errorf("keep 0 picked %d", len(got))
	}
}

// A checkpoint given as a sampler archive is unpacked, loaded and evaluated,
// with the step taken from its name.
func TestEvaluateCheckpointArchive(t *testing.T) {
	r := testRecipe(t, "", "train.steps=1", "eval.datasets.nq=")
	runRecipe(t, r, 1)
	archives, _ := filepath.Glob(filepath.Join(r.Trainer.CheckpointsDir, "*", "sampler_weights", "*.tar.gz"))
	if len(archives) != 1 {
		t.Fatalf("archives %v", archives)
	}
	r2 := testRecipe(t, "", "eval.datasets.nq=")
	deps, emb, err := setup.Connect(context.Background(), r2, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	recs, err := Evaluate(context.Background(), r2, deps, EvalOptions{Strategy: "search", Checkpoint: archives[0], Step: -1})
	if err != nil {
		t.Fatal(err)
	}
	if recs[0].Step != 1 {
		t.Errorf("step %d, want 1 from the archive's name %s", recs[0].Step, filepath.Base(archives[0]))
	}
	if _, err := os.Stat(filepath.Join(r2.Sync.Dir, adapterIn(t, r.Output.Dir, 1), "adapter_config.json")); err != nil {
		t.Error(err)
	}

	// With sync.kind sglang_disk the archive is loaded as full weights with
	// /update_weights_from_disk and evaluated under the base name; the
	// simulator's full weights are the adapter's, so the records agree.
	r3 := testRecipe(t, "", "eval.datasets.nq=", "sync.kind=sglang_disk", "trainer.lora_rank=0", "sim.trainer.backend=fsdp")
	deps3, emb3, err := setup.Connect(context.Background(), r3, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb3.Close()
	recs3, err := Evaluate(context.Background(), r3, deps3, EvalOptions{Strategy: "search", Checkpoint: archives[0], Step: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs3) != len(recs) || recs3[0].EM != recs[0].EM || recs3[0].F1 != recs[0].F1 || recs3[0].Step != 1 {
		t.Errorf("full-weight evaluation %+v, adapter evaluation %+v", recs3, recs)
	}
	if got := emb3.Sim().Policies[0].WeightsPath(); got == "" || !strings.HasPrefix(got, r3.Sync.Dir) {
		t.Errorf("replica loaded weights from %q, want a directory under %s", got, r3.Sync.Dir)
	}
}

// evalsText renders evaluation records whole, health included, for tests
// that compare two runs' evaluations (fmt would print the health's
// pointer). The health's sampled_entropy is left out: it sums the sampled
// tokens' logprobs, which the simulated vLLM, SGLang and Tinker routes give
// equal to the last bit or two (0.18069546502468678 against ...672), not
// bit for bit; every count and rate is compared.
func evalsText(recs []results.EvalRecord) string {
	recs = slices.Clone(recs)
	for i := range recs {
		if h := recs[i].Health; h != nil {
			c := *h
			c.SampledEntropy = 0
			recs[i].Health = &c
		}
	}
	b, err := json.Marshal(recs)
	if err != nil {
		panic(err)
	}
	return string(b)
}
