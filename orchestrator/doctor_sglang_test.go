package orchestrator

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
	"github.com/hindsearch/hindsearch/recipes"
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
	mu        sync.Mutex
	paths     []string
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
		meta := map[string]any{"finish_reason": map[string]any{"type": "length", "length": 1},
			"output_token_logprobs": [][]any{{lp, out, nil}}}
		if b.LogprobStartLen == 0 {
			in := [][]any{{nil, b.InputIDs[0], nil}}
			for _, id := range b.InputIDs[1:] {
				in = append(in, []any{rawLogprob(id), id, nil})
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
	return newChecker(&r, Deps{}, nil, 2*time.Second, false), p
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
