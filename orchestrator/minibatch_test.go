package orchestrator

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/recipes"
)

// trainCall is one training request as the trainer received it.
type trainCall struct {
	path string
	body map[string]any
}

// trainerRecorder is a reverse proxy in front of a trainer that records
// the bodies of forward_backward and optim_step.
type trainerRecorder struct {
	mu    sync.Mutex
	calls []trainCall
}

func (rec *trainerRecorder) start(t *testing.T, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/forward_backward") || strings.HasSuffix(r.URL.Path, "/optim_step") {
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(b))
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Errorf("%s: %v", r.URL.Path, err)
			}
			rec.mu.Lock()
			rec.calls = append(rec.calls, trainCall{path: r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:], body: m})
			rec.mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// miniBatches cuts the recorded calls into mini-batches: the datums of the
// forward_backward calls before each optim_step, and that optim_step's
// learning rate.
func (rec *trainerRecorder) miniBatches(t *testing.T) (datums [][]map[string]any, lrs []float64) {
	t.Helper()
	var cur []map[string]any
	for _, c := range rec.calls {
		if c.path == "optim_step" {
			datums = append(datums, cur)
			cur = nil
			lrs = append(lrs, c.body["adam_params"].(map[string]any)["learning_rate"].(float64))
			continue
		}
		in := c.body["forward_backward_input"].(map[string]any)
		for _, d := range in["data"].([]any) {
			cur = append(cur, d.(map[string]any))
		}
	}
	if len(cur) > 0 {
		t.Fatalf("%d datums sent after the last optim_step", len(cur))
	}
	return datums, lrs
}

// runRecorded runs r on embedded servers with its trainer calls going
// through a recorder.
func runRecorded(t *testing.T, r *recipes.Recipe) (*Summary, *trainerRecorder) {
	t.Helper()
	rec := &trainerRecorder{}
	sum, out := runRecipeWith(t, r, 1, func(deps *roles.Deps, emb *setup.Embedded) {
		tc, err := trainer.New(transport.DefaultOptions("trainer", rec.start(t, emb.Sim().TrainerURL)), "")
		if err != nil {
			t.Fatal(err)
		}
		deps.Trainer = tc
	})
	if !strings.Contains(out, "training: 3 optim_steps a step") && r.Trainer.MiniBatchSize == 6 {
		t.Errorf("the banner does not say the mini-batches:\n%s", out)
	}
	return sum, rec
}

func floats(t *testing.T, d map[string]any, key string) []float64 {
	t.Helper()
	td := d["loss_fn_inputs"].(map[string]any)[key].(map[string]any)
	var out []float64
	for _, v := range td["data"].([]any) {
		out = append(out, v.(float64))
	}
	return out
}

// A run with trainer.mini_batch_size below a step's trajectories sends one
// optim_step per mini-batch at the step's warming learning rate, each
// mini-batch's advantages scaled to its own token count (token-mean on
// the FSDP-like trainer's token sum): the same datums as the unscaled sum
// aggregation's, divided by the mini-batch's policy tokens. The streamed
// async schedule sends exactly the requests of the lockstep one.
func TestMiniBatchesWarmupAndTokenMean(t *testing.T) {
	base := []string{"eval.datasets.nq=", "eval.datasets.hotpotqa=", "hindsight.enabled=false",
		"trainer.lora_rank=0", "sync.kind=sglang_disk", "policy.server=sglang", "policy.tokenize=local", "sim.trainer.backend=fsdp",
		"trainer.mini_batch_size=6", "trainer.lr_warmup_steps=2"}
	run := func(sets ...string) (*Summary, [][]map[string]any, []float64) {
		r := testRecipe(t, "", append(append([]string(nil), base...), sets...)...)
		sum, rec := runRecorded(t, r)
		ds, lrs := rec.miniBatches(t)
		return sum, ds, lrs
	}
	sum, mean, lrs := run("trainer.loss_agg=token-mean")
	// 4 questions x 4 samples = 16 trajectories: mini-batches of 6, 6, 4.
	if len(mean) != 6 {
		t.Fatalf("%d optim_steps in 2 steps, want 3 a step", len(mean))
	}
	for i, want := range []float64{0, 0, 0, 0.15, 0.15, 0.15} {
		if math.Abs(lrs[i]-want) > 1e-12 {
			t.Errorf("optim_step %d: learning_rate %v, want %v (0.3 warmed up over 2 steps)", i+1, lrs[i], want)
		}
	}
	for i, s := range sum.Steps {
		if s.OptimSteps != 3 || math.Abs(s.LearningRate-[]float64{0, 0.15}[i]) > 1e-12 {
			t.Errorf("step %d record: optim_steps %d learning_rate %v", s.Step, s.OptimSteps, s.LearningRate)
		}
	}
	_, raw, _ := run("trainer.loss_agg=sum")
	for k := range mean {
		if k >= 3 {
			break // step 1 trained at rate 0: step 2 samples the same weights in both runs, but Adam's moments differ
		}
		if len(mean[k]) != len(raw[k]) {
			t.Fatalf("mini-batch %d: %d datums, unscaled %d", k+1, len(mean[k]), len(raw[k]))
		}
		n := 0.0
		for _, d := range mean[k] {
			for _, w := range floats(t, d, "weights") {
				n += w
			}
		}
		for i := range mean[k] {
			a, b := floats(t, mean[k][i], "advantages"), floats(t, raw[k][i], "advantages")
			for j := range a {
				if math.Abs(a[j]*n-b[j]) > 1e-4*math.Max(1, math.Abs(b[j])) {
					t.Fatalf("mini-batch %d datum %d token %d: advantage %v x %v tokens != unscaled %v", k+1, i, j, a[j], n, b[j])
				}
			}
		}
	}
	_, lock, _ := run("trainer.loss_agg=token-mean", "rollout.schedule=lockstep")
	a, _ := json.Marshal(mean)
	b, _ := json.Marshal(lock)
	if !bytes.Equal(a, b) {
		t.Error("the streamed async schedule's mini-batches differ from the lockstep schedule's")
	}
}

// The simulated trainer's two backends aggregate differently (JAX each
// datum's token mean, averaged; FSDP one token sum), yet with the
// advantages scaled for each every aggregation reaches the same gradient:
// the grad_norm of a step's first optim_step (before FSDP's clip) agrees.
func TestEveryAggregationGivesOneGradientOnBothBackends(t *testing.T) {
	for _, agg := range []string{recipes.LossAggTokenMean, recipes.LossAggSeqMeanTokenMean, recipes.LossAggSeqMeanTokenSum, recipes.LossAggSum} {
		var norms []float64
		for _, be := range []string{recipes.SimBackendJAX, recipes.SimBackendFSDP} {
			r := testRecipe(t, "", "eval.datasets.nq=", "eval.datasets.hotpotqa=", "train.steps=1", "trainer.mini_batch_size=8",
				"trainer.loss_agg="+agg, "sim.trainer.backend="+be)
			sum, _ := runRecipe(t, r, 1)
			norms = append(norms, sum.Steps[0].TrainerMetrics["optim_step/grad_norm"])
		}
		if norms[0] == 0 || math.Abs(norms[0]-norms[1]) > 1e-6*norms[0] {
			t.Errorf("%s: grad_norm %v on jax, %v on fsdp", agg, norms[0], norms[1])
		}
	}
}

// trainer.kl_coef scores every trajectory under the reference (an
// embedded reference server here): the step records the mean KL, 0 while
// the policy is still the initial weights and above 0 once it moved, and
// the reference phase; trainer.entropy_coef's estimate is recorded; both
// terms change the datums sent.
func TestKLAndEntropyTerms(t *testing.T) {
	sets := []string{"eval.datasets.nq=", "eval.datasets.hotpotqa=", "train.steps=2"}
	with := testRecipe(t, "reference: {urls: [embedded]}", append(sets, "trainer.kl_coef=0.5", "trainer.entropy_coef=0.5")...)
	sum, out := runRecipe(t, with, 1)
	if !strings.Contains(out, "KL 0.5 to embedded, entropy 0.5") {
		t.Errorf("banner:\n%s", out)
	}
	s1, s2 := sum.Steps[0], sum.Steps[1]
	if s1.KL == nil || s2.KL == nil {
		t.Fatalf("kl not recorded: %v %v", s1.KL, s2.KL)
	}
	if math.Abs(*s1.KL) > 1e-9 || *s2.KL <= 0 {
		t.Errorf("kl %v at step 1 (the initial weights), %v at step 2: want 0, then above 0", *s1.KL, *s2.KL)
	}
	if s1.Entropy <= 0 || s2.PhaseSeconds["reference"] <= 0 {
		t.Errorf("entropy %v, reference phase %v", s1.Entropy, s2.PhaseSeconds["reference"])
	}
	without, _ := runRecipe(t, testRecipe(t, "", sets...), 1)
	if without.Steps[0].KL != nil {
		t.Error("kl recorded without trainer.kl_coef")
	}
	if without.Steps[0].BatchDigest == s1.BatchDigest {
		t.Error("the entropy term did not change step 1's datums")
	}
}

// hindsight.term_agg search-mean end to end: the OPD term is a loss of its
// own, the same gradient on both simulated backends (their aggregations
// differ, the program's scaling makes them agree), another update than the
// advantage route's, and steps.jsonl says what per-token weight it
// amounted to (policy tokens over term tokens, above 1) and, under PPO,
// how many OPD tokens its clip could reach.
func TestTermAggSearchMean(t *testing.T) {
	sets := []string{"eval.datasets.nq=", "eval.datasets.hotpotqa=", "train.steps=1", "trainer.mini_batch_size=8", "hindsight.coef=0.5"}
	var norms []float64
	var digest string
	for _, be := range []string{recipes.SimBackendJAX, recipes.SimBackendFSDP} {
		r := testRecipe(t, "", append(slices.Clone(sets), "hindsight.term_agg=search-mean", "sim.trainer.backend="+be)...)
		sum, out := runRecipe(t, r, 1)
		s := sum.Steps[0]
		if s.OPDTokens == 0 || s.OPDTermScale <= 1 || !strings.Contains(out, "term_agg=search-mean") {
			t.Fatalf("%s: %d OPD tokens, opd_term_scale %v\n%s", be, s.OPDTokens, s.OPDTermScale, out)
		}
		norms = append(norms, s.TrainerMetrics["optim_step/grad_norm"])
		digest = s.BatchDigest
	}
	if norms[0] == 0 || math.Abs(norms[0]-norms[1]) > 1e-6*norms[0] {
		t.Errorf("search-mean: grad_norm %v on jax, %v on fsdp", norms[0], norms[1])
	}
	// The advantage route under PPO's clip: the OPD tokens of the second
	// mini-batch are counted as clippable.
	adv, _ := runRecipe(t, testRecipe(t, "", append(slices.Clone(sets), "sim.trainer.backend=fsdp", "trainer.loss=ppo")...), 1)
	s := adv.Steps[0]
	if s.BatchDigest == digest || s.OPDTermScale != 0 {
		t.Errorf("the advantage route sent the same datums (%v) or recorded a term scale (%v)", s.BatchDigest == digest, s.OPDTermScale)
	}
	if s.OptimSteps != 2 || s.OPDTokensClippable == 0 || s.OPDTokensClippable >= s.OPDTokens {
		t.Errorf("ppo, %d optim_steps: %d of %d OPD tokens clippable, want some (the second mini-batch's), not all", s.OptimSteps, s.OPDTokensClippable, s.OPDTokens)
	}
}
