package doctor

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy/sglang"
	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/sim"
)

// sgFake is an SGLang server for doctor's policy rows: /health,
// /get_model_info, /v1/models, /generate (one token; logprobs raw or
// divided by the temperature as SGLang's sampler reports them by default),
// the LoRA routes and /update_weights_from_disk.
type sgFake struct {
	*httptest.Server
	model     string
	processed bool // logprobs after temperature scaling
	noLoRA    bool // LoRA off: the LoRA routes refuse naming --enable-lora
	certain   bool // the sampled token is near-certain (raw logprob -0.0005)
	mu        sync.Mutex
	paths     []string
	generates []string // /generate bodies
}

// lastGenerate is the last /generate body f received.
func lastGenerate(t *testing.T, f *sgFake) string {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.generates) == 0 {
		t.Fatal("no /generate request")
	}
	return f.generates[len(f.generates)-1]
}

func newSGFake(t *testing.T, model string) *sgFake {
	f := &sgFake{model: model}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

// rawLogprob is the fake model's logprob of token id at temperature 1.
func rawLogprob(id int) float64 { return -0.1 - float64(id%7)/10 }

func (f *sgFake) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.paths = append(f.paths, r.URL.Path)
	if r.URL.Path == "/generate" {
		f.generates = append(f.generates, string(raw))
	}
	f.mu.Unlock()
	js := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	switch r.URL.Path {
	case "/health":
		w.WriteHeader(http.StatusOK)
	case "/get_model_info":
		js(200, map[string]any{"model_path": f.model, "is_generation": true})
	case "/v1/models":
		js(200, map[string]any{"object": "list", "data": []map[string]any{{"id": f.model}}})
	case "/unload_lora_adapter", "/load_lora_adapter":
		msg := "The LoRA adapter hindsearch-doctor-probe is not loaded."
		if f.noLoRA {
			msg = "LoRA is not enabled. Please set --enable-lora."
		}
		js(400, map[string]any{"success": false, "error_message": msg})
	case "/update_weights_from_disk":
		js(400, map[string]any{"success": false, "message": "no such file"})
	case "/generate":
		var b struct {
			InputIDs        []int `json:"input_ids"`
			LogprobStartLen int   `json:"logprob_start_len"`
			Sampling        struct {
				Temperature float64 `json:"temperature"`
			} `json:"sampling_params"`
		}
		_ = json.Unmarshal(raw, &b)
		temp := b.Sampling.Temperature
		if temp == 0 {
			temp = 1 // greedy runs at temperature 1 with top_k 1
		}
		out := 5
		lp := rawLogprob(out)
		if f.processed {
			lp = rawLogprob(out)/temp - math.Log(2) // another distribution
		}
		if f.certain {
			// p near 1: at temperature T the processed logprob is about
			// raw/T, as near 0 (exactly so here).
			lp = -0.0005
			if f.processed {
				lp = -0.0005 / temp
			}
		}
		meta := map[string]any{"finish_reason": map[string]any{"type": "length", "length": 1},
			"output_token_logprobs": [][]any{{lp, out, nil}}}
		if b.LogprobStartLen == 0 {
			in := [][]any{{nil, b.InputIDs[0], nil}}
			for _, id := range b.InputIDs[1:] {
				l := rawLogprob(id)
				if f.certain && id == out {
					l = -0.0005
				}
				in = append(in, []any{l, id, nil})
			}
			meta["input_token_logprobs"] = in
		}
		js(200, map[string]any{"text": "x", "output_ids": []int{out}, "meta_info": meta})
	default:
		js(404, map[string]any{"detail": "Not Found"})
	}
}

func sgChecker(t *testing.T, f *sgFake, mut func(*recipes.Recipe)) (*checker, *sglang.Client) {
	t.Helper()
	r := recipes.Defaults()
	r.Policy.Server, r.Policy.Tokenize = recipes.ServerSGLang, recipes.TokenizeLocal
	if mut != nil {
		mut(&r)
	}
	o := transport.DefaultOptions("policy", f.URL)
	o.Timeout, o.Retries = 2*time.Second, 0
	p, err := sglang.New(o, r.Policy.Model)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return newChecker(&r, roles.Deps{}, nil, 2*time.Second, false), p
}

func rowOf(t *testing.T, checks []Check, name string) Check {
	t.Helper()
	for _, c := range checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no %q row in %+v", name, checks)
	return Check{}
}

// With policy.server sglang, health and models go to SGLang's own routes.
func TestDoctorSGLangModelsThroughGetModelInfo(t *testing.T) {
	f := newSGFake(t, "Qwen/Qwen2.5-3B-Instruct")
	c, p := sgChecker(t, f, nil)
	rc := c.policy(context.Background(), p)
	if ch := rowOf(t, rc.checks, "models"); ch.Status != CheckOK {
		t.Fatalf("models %+v", ch)
	}
	f.model = "other"
	rc = c.policy(context.Background(), p)
	ch := rowOf(t, rc.checks, "models")
	if ch.Status != CheckFail || !strings.Contains(ch.Fix, "start SGLang with --served-model-name Qwen/Qwen2.5-3B-Instruct") {
		t.Fatalf("models %+v", ch)
	}
}

// SGLang's LoRA routes: a refused unload of a missing adapter is LoRA on;
// a refusal naming --enable-lora is LoRA off, with SGLang's flags as fix.
func TestDoctorSGLangLoRARoutes(t *testing.T) {
	f := newSGFake(t, "Qwen/Qwen2.5-3B-Instruct")
	lora := func(r *recipes.Recipe) { r.Sync.Kind, r.Trainer.LoRARank = recipes.SyncLoRA, 32 }
	c, p := sgChecker(t, f, lora)
	if ch := rowOf(t, c.policy(context.Background(), p).checks, "lora routes"); ch.Status != CheckOK {
		t.Fatalf("lora on: %+v", ch)
	}
	f.noLoRA = true
	ch := rowOf(t, c.policy(context.Background(), p).checks, "lora routes")
	if ch.Status != CheckFail || !strings.Contains(ch.Fix, "--enable-lora --max-lora-rank 32") || !strings.Contains(ch.Fix, "--max-loras-per-batch") {
		t.Fatalf("lora off: %+v", ch)
	}
}

// The one-token /generate and input_token_logprobs scoring probe.
func TestDoctorSGLangLogprobsProbe(t *testing.T) {
	f := newSGFake(t, "Qwen/Qwen2.5-3B-Instruct")
	c, p := sgChecker(t, f, nil)
	if ch := c.logprobs(context.Background(), p, []int{1, 2, 3}); ch.Status != CheckOK {
		t.Fatalf("logprobs %+v", ch)
	}
	f.Close()
	ch := c.logprobs(context.Background(), p, []int{1, 2, 3})
	if ch.Status != CheckFail || !strings.Contains(ch.Detail, "POST /generate") {
		t.Fatalf("logprobs down: %+v", ch)
	}
}

// Raw logprobs (one token's logprob the same at temperature 0.5 and 1) are
// OK; temperature-scaled ones warn at train.temperature other than 1 and
// name SGLANG_RETURN_ORIGINAL_LOGPROB.
func TestDoctorSGLangLogprobsMode(t *testing.T) {
	f := newSGFake(t, "Qwen/Qwen2.5-3B-Instruct")
	c, p := sgChecker(t, f, func(r *recipes.Recipe) { r.Train.Temperature = 0.8 })
	if ch := c.logprobsMode(context.Background(), p, []int{1, 2, 3}); ch.Status != CheckOK || !strings.Contains(ch.Detail, "raw logprobs") {
		t.Fatalf("raw: %+v", ch)
	}
	f.processed = true
	ch := c.logprobsMode(context.Background(), p, []int{1, 2, 3})
	if ch.Status != CheckWarn || !strings.Contains(ch.Fix, "SGLANG_RETURN_ORIGINAL_LOGPROB=True") {
		t.Fatalf("processed: %+v", ch)
	}
	c.r.Train.Temperature = 1
	if ch := c.logprobsMode(context.Background(), p, []int{1, 2, 3}); ch.Status != CheckOK {
		t.Fatalf("processed at temperature 1: %+v", ch)
	}
}

// SGLang before 0.5.3 has no sampling_seed: the rollout-shaped /generate
// probe fails in preflight and doctor, naming the version and the fix; a
// server without --enable-deterministic-inference gets a warning.
func TestSGLangPreflightNamesAnOldVersionAndDoctorWarnsWithoutDeterminism(t *testing.T) {
	r := testRecipe(t, "", "policy.server=sglang", "policy.tokenize=local")
	ctx := context.Background()
	deps, emb, err := setup.Connect(ctx, r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	if err := Preflight(ctx, r, deps); err != nil {
		t.Fatalf("current version: %v", err)
	}
	srv := emb.Sim().Policies[0]
	srv.SetSGLang(sim.SGLangOptions{Version: "0.5.2"})
	err = Preflight(ctx, r, deps)
	if err == nil || !strings.Contains(err.Error(), "POST /generate with a rollout's fields") || !strings.Contains(err.Error(), "status 500") ||
		!strings.Contains(err.Error(), "version 0.5.2") || !strings.Contains(err.Error(), "upgrade SGLang to 0.5.3 or later") {
		t.Fatalf("old version: %v", err)
	}
	rep := Run(ctx, r, deps, Options{})
	if ch := rowOf(t, rep.Checks, "generate"); ch.Status != CheckFail || !strings.Contains(ch.Fix, "this server is 0.5.2") {
		t.Errorf("doctor generate row: %+v", ch)
	}
	if ch := rowOf(t, rep.Checks, "deterministic"); ch.Status != CheckOK {
		t.Errorf("deterministic row with the flag on: %+v", ch)
	}
	srv.SetSGLang(sim.SGLangOptions{NondeterministicInference: true})
	rep = Run(ctx, r, deps, Options{})
	ch := rowOf(t, rep.Checks, "deterministic")
	if ch.Status != CheckWarn || !strings.Contains(ch.Detail, "ignores sampling_seed") || !strings.Contains(ch.Fix, "--enable-deterministic-inference") {
		t.Errorf("deterministic row with the flag off: %+v", ch)
	}
	if ch := rowOf(t, rep.Checks, "generate"); ch.Status != CheckOK {
		t.Errorf("generate row: %+v", ch)
	}
}

// A near-certain sampled token tells raw from temperature-scaled logprobs
// apart by less than the tolerance: logprobs mode must not read it as raw.
func TestDoctorSGLangLogprobsModeSkipsNearCertainTokens(t *testing.T) {
	f := newSGFake(t, "Qwen/Qwen2.5-3B-Instruct")
	f.certain = true
	f.processed = true
	c, p := sgChecker(t, f, func(r *recipes.Recipe) { r.Train.Temperature = 0.8 })
	ch := c.logprobsMode(context.Background(), p, []int{1, 2, 3})
	if ch.Status != CheckSkip || !strings.Contains(ch.Detail, "near-certain") {
		t.Fatalf("near-certain processed token: %+v", ch)
	}
	f.mu.Lock()
	sampled := f.generates[len(f.generates)-2]
	f.mu.Unlock()
	if !strings.Contains(sampled, `"max_new_tokens":8,"temperature":0.5,`) || !strings.Contains(sampled, `"sampling_seed":1`) {
		t.Errorf("probe body %s: want several positions sampled at temperature 0.5", sampled)
	}
	if !strings.Contains(lastGenerate(t, f), `"input_ids":[1,2,3,5],`) || !strings.Contains(lastGenerate(t, f), `"logprob_start_len":0`) {
		t.Errorf("scoring body %s", lastGenerate(t, f))
	}
}
