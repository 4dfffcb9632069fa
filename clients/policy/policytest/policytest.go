// Package policytest is the contract suite of the policy role: one set of
// subtests that every policy backend (a client of clients/policy's Policy
// interface and the server it speaks to: vLLM, SGLang, their simulators)
// must pass. The behaviours are those docs/conformance.md records of the
// real servers and that the program relies on; each subtest names the
// section it comes from.
//
// A new backend implements policy.Policy, writes a test that returns a
// Backend for a fresh server, and calls Run:
//
//	func TestMyBackendContract(t *testing.T) {
//		policytest.Run(t, func(t *testing.T) *policytest.Backend { ... })
//	}
//
// The package imports no simulator: the hooks of Backend are how a test
// makes its server fail, and where it finds weights the server can load.
package policytest

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy"
)

// Backend is one fresh policy server, serving Base with no adapter loaded,
// and the client under test that speaks to it. Run asks for a new Backend
// in every subtest; the function that makes it registers the cleanup of
// its server and client with t.Cleanup.
type Backend struct {
	// Policy is the client under test.
	Policy policy.Policy
	// Base is the model the server serves at start (policy.model).
	Base string
	// Prompt is a prompt of Base's tokenizer that the served model
	// continues with one of Stops within 500 tokens, for most seeds (a
	// Search-R1 rollout prompt does).
	Prompt []int
	// Stops are the stop strings of Prompt's turns (the Search-R1 ones).
	Stops []string
	// Encode tokenizes text as the served model's tokenizer does, without
	// special tokens: what Tokenize must answer for plain text.
	Encode func(text string) []int
	// ChatTemplate says the server applies the model's chat template in
	// TokenizeChat (vLLM). When false (SGLang's /tokenize has none, so the
	// program tokenizes locally) TokenizeChat must fail with an error
	// wrapping ErrNoChatTemplate.
	ChatTemplate      bool
	ErrNoChatTemplate error
	// ErrNoTokenizer, when set, is the error Tokenize and TokenizeChat
	// wrap: a server with no tokenizer route at all (Tinker), for which
	// the program tokenizes locally.
	ErrNoTokenizer error
	// Adapter writes weights the server can serve under a name of their
	// own (LoadLoRA) and returns their path: a PEFT adapter directory, or
	// for a Tinker server the tinker:// path of sampler weights it saved.
	Adapter func(t *testing.T) string
	// Weights writes a full model directory the server can load with
	// UpdateWeightsFromDisk and returns its path; nil for a server without
	// the route (stock vLLM), whose UpdateWeightsFromDisk must fail with
	// an error wrapping policy.ErrWeightsFromDiskUnsupported.
	Weights func(t *testing.T) string
	// ErrLoRADisabled is the error the client wraps when the server's LoRA
	// routes are off (policy.ErrLoRADisabled, sglang.ErrLoRADisabled).
	ErrLoRADisabled error
	// NoLoRA returns a client of a server of the same kind started with
	// runtime LoRA loading off; nil skips that subtest.
	NoLoRA func(t *testing.T) policy.Policy
	// CompletePath is the route Complete and Score post to
	// ("/v1/completions", "/generate").
	CompletePath string
	// Fault makes the server's next n requests to path fail, before the
	// server handles them, with kind: "503" (an error status) or "reset"
	// (the connection closed without an answer).
	Fault func(path string, n int, kind string)
	// Requests is the number of requests to path that reached the server
	// so far, faulted ones included.
	Requests func(path string) int
	// Retries is the client's transport Retries: the number of faulted
	// attempts one call absorbs.
	Retries int
	// UnknownModelRefused says a request for a model the server was
	// never given is refused as the program's error wrapping it, not a
	// replica down (a Tinker client: its sampling sessions live on the
	// server, so draining the replica would bring nothing back).
	UnknownModelRefused error
	// Refuse edits a valid request into one the server refuses once
	// sent, and not again (nil: temperature -1, which vLLM and SGLang
	// refuse).
	Refuse func(req *policy.CompletionRequest)
}

// Run runs the contract suite against the backends newBackend makes, one
// per subtest. Every subtest is named after the behaviour it holds the
// backend to.
func Run(t *testing.T, newBackend func(t *testing.T) *Backend) {
	for _, st := range []struct {
		name string
		fn   func(t *testing.T, b *Backend)
	}{
		{"CompletionReturnsTokenIDsAndLogprobs", completionIDsAndLogprobs},
		{"CompletionMaxTokensEndsWithLength", completionLength},
		{"StopStringIsKeptInTheOutput", stopKept},
		{"ScoreGivesOneLogprobPerTokenFirstZero", score},
		{"TokenizeMatchesTheModelsTokenizer", tokenize},
		{"TokenizeChatAppliesTheServersTemplate", tokenizeChat},
		{"HealthAnswers", health},
		{"ModelsListsBaseAndLoadedAdapters", models},
		{"LoRALoadServeUnload", loraLoadServeUnload},
		{"LoRALoadTwiceIsAlreadyLoaded", loraTwice},
		{"LoRALoadMissingAdapterFails", loraMissing},
		{"LoRAUnloadUnknownNameIsRefused", loraUnloadUnknown},
		{"CompleteUnknownModelIsReplicaDown", unknownModel},
		{"LoRADisabledIsNamed", loraDisabled},
		{"UpdateWeightsFromDisk", weightsFromDisk},
		{"TransientFaultsAreRetried", faultsRetried},
		{"FaultsPastTheRetriesAreReplicaDown", faultsExhausted},
		{"RefusalIsNotRetried", refusalNotRetried},
	} {
		t.Run(st.name, func(t *testing.T) { st.fn(t, newBackend(t)) })
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func seed(s int64) *int64 { return &s }

// checkCompletion holds a completion to the shape the program reads.
func checkCompletion(t *testing.T, c *policy.Completion) {
	t.Helper()
	if len(c.TokenIDs) == 0 {
		t.Fatalf("completion without token ids: %+v", c)
	}
	if len(c.Logprobs) != len(c.TokenIDs) {
		t.Fatalf("%d logprobs for %d token ids", len(c.Logprobs), len(c.TokenIDs))
	}
	if len(c.TextOffsets) != 0 && len(c.TextOffsets) != len(c.TokenIDs) {
		t.Errorf("%d text offsets for %d token ids", len(c.TextOffsets), len(c.TokenIDs))
	}
	for i, id := range c.TokenIDs {
		if id < 0 {
			t.Errorf("token %d: id %d < 0", i, id)
		}
		if lp := c.Logprobs[i]; !(lp <= 0) || math.IsInf(lp, 0) {
			t.Errorf("token %d: logprob %v, want finite and <= 0", i, lp)
		}
	}
	if c.FinishReason != "stop" && c.FinishReason != "length" {
		t.Errorf("finish reason %q, want stop or length", c.FinishReason)
	}
}

// conformance.md "vLLM: sampling and scoring" (logprobs, return_tokens_as_
// token_ids) and "SGLang: native /generate" (output_ids,
// output_token_logprobs): ids are the sampled ids, one logprob each.
func completionIDsAndLogprobs(t *testing.T, b *Backend) {
	c, err := b.Policy.Complete(ctx(t), policy.CompletionRequest{Model: b.Base, Prompt: b.Prompt, MaxTokens: 500,
		Sampling: policy.Neutral(), Seed: seed(1), Stop: b.Stops})
	if err != nil {
		t.Fatal(err)
	}
	checkCompletion(t, c)
	if c.Text == "" {
		t.Error("completion without text")
	}
}

// conformance.md "vLLM: sampling and scoring" (max_tokens) and "SGLang:
// native /generate" (max_new_tokens, finish_reason length).
func completionLength(t *testing.T, b *Backend) {
	c, err := b.Policy.Complete(ctx(t), policy.CompletionRequest{Model: b.Base, Prompt: b.Prompt, MaxTokens: 3,
		Sampling: policy.Neutral(), Seed: seed(2)})
	if err != nil {
		t.Fatal(err)
	}
	checkCompletion(t, c)
	if c.FinishReason != "length" || len(c.TokenIDs) != 3 {
		t.Errorf("max tokens 3: finish %q with %d tokens, want length with 3", c.FinishReason, len(c.TokenIDs))
	}
}

// conformance.md "vLLM: sampling and scoring" (stop,
// include_stop_str_in_output) and "SGLang: native /generate" (no_stop_trim):
// a turn ending at a stop string keeps it in its text, and StopReason
// names it.
func stopKept(t *testing.T, b *Backend) {
	stopped := 0
	for s := int64(1); s <= 6; s++ {
		c, err := b.Policy.Complete(ctx(t), policy.CompletionRequest{Model: b.Base, Prompt: b.Prompt, MaxTokens: 500,
			Sampling: policy.Neutral(), Seed: seed(s), Stop: b.Stops})
		if err != nil {
			t.Fatal(err)
		}
		checkCompletion(t, c)
		if c.FinishReason != "stop" || c.StopReason == "" {
			continue
		}
		stopped++
		if !slices.Contains(b.Stops, c.StopReason) {
			t.Errorf("seed %d: stop reason %q, not one of %q", s, c.StopReason, b.Stops)
		}
		if !strings.Contains(c.Text, c.StopReason) {
			t.Errorf("seed %d: text %q lost the stop string %q", s, c.Text, c.StopReason)
		}
	}
	if stopped == 0 {
		t.Fatalf("no completion of six ended at one of %q", b.Stops)
	}
}

// conformance.md "vLLM: sampling and scoring" (prompt_logprobs: entry 0
// null) and "SGLang: native /generate" (input_token_logprobs, first
// [null, id, null]): one logprob per token, entry 0 reported as 0.
func score(t *testing.T, b *Backend) {
	seq := b.Prompt
	lps, err := b.Policy.Score(ctx(t), b.Base, seq)
	if err != nil {
		t.Fatal(err)
	}
	if len(lps) != len(seq) {
		t.Fatalf("%d logprobs for %d tokens", len(lps), len(seq))
	}
	if lps[0] != 0 {
		t.Errorf("entry 0 is %v, want 0 (no context)", lps[0])
	}
	for i, lp := range lps[1:] {
		if !(lp <= 0) || math.IsInf(lp, 0) {
			t.Errorf("token %d: logprob %v, want finite and <= 0", i+1, lp)
		}
	}
	// The same sequence scores the same: the teacher's logprobs are a
	// function of the tokens.
	again, err := b.Policy.Score(ctx(t), b.Base, seq)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again, lps) {
		t.Error("scoring the same sequence twice gave different logprobs")
	}
}

// conformance.md "vLLM: tokenization, models, health, LoRA" (POST
// /tokenize {model, prompt, add_special_tokens}) and "SGLang: native
// /generate" (/tokenize without a chat template).
func tokenize(t *testing.T, b *Backend) {
	const text = "Who wrote The Old Man and the Sea? <search> Hemingway </search>"
	ids, err := b.Policy.Tokenize(ctx(t), b.Base, text, false)
	if b.ErrNoTokenizer != nil {
		if !errors.Is(err, b.ErrNoTokenizer) {
			t.Fatalf("tokenize: %v, want an error wrapping %v", err, b.ErrNoTokenizer)
		}
		t.Skip("the server has no tokenizer route: the program tokenizes locally (policy.tokenize: local)")
	}
	if err != nil {
		t.Fatal(err)
	}
	if want := b.Encode(text); !slices.Equal(ids, want) {
		t.Errorf("tokenize %q: %v, want %v", text, ids, want)
	}
}

// conformance.md "vLLM: tokenization, models, health, LoRA" (/tokenize
// with messages: add_generation_prompt) and "SGLang: native /generate"
// (no chat template: policy.tokenize local).
func tokenizeChat(t *testing.T, b *Backend) {
	msgs := []policy.Message{{Role: "user", Content: "Who wrote The Old Man and the Sea?"}}
	with, err := b.Policy.TokenizeChat(ctx(t), b.Base, msgs, true)
	if b.ErrNoTokenizer != nil {
		if !errors.Is(err, b.ErrNoTokenizer) {
			t.Fatalf("tokenize chat: %v, want an error wrapping %v", err, b.ErrNoTokenizer)
		}
		t.Skip("the server has no tokenizer route: the program tokenizes locally (policy.tokenize: local)")
	}
	if !b.ChatTemplate {
		if err == nil || !errors.Is(err, b.ErrNoChatTemplate) {
			t.Fatalf("tokenize chat: %v, want an error wrapping %v", err, b.ErrNoChatTemplate)
		}
		t.Skip("the server applies no chat template: the program tokenizes locally (policy.tokenize: local)")
	}
	if err != nil {
		t.Fatal(err)
	}
	without, err := b.Policy.TokenizeChat(ctx(t), b.Base, msgs, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(with) <= len(without) || !slices.Equal(with[:len(without)], without) {
		t.Errorf("with the generation prompt %v, without %v: want a longer sequence with the same start", with, without)
	}
}

// conformance.md "vLLM: tokenization, models, health, LoRA" (GET /health).
func health(t *testing.T, b *Backend) {
	if err := b.Policy.Health(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if b.Policy.URL() == "" {
		t.Error("empty URL")
	}
}

func listed(t *testing.T, p policy.Policy) []string {
	t.Helper()
	ids, err := p.Models(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// conformance.md "vLLM: tokenization, models, health, LoRA" (GET
// /v1/models) and "SGLang: native /generate" (/get_model_info then
// /v1/models).
func models(t *testing.T, b *Backend) {
	if ids := listed(t, b.Policy); !slices.Contains(ids, b.Base) {
		t.Fatalf("models %q: no base model %q", ids, b.Base)
	}
	dir := b.Adapter(t) // before ctx: making it may take most of a call's budget
	if err := b.Policy.LoadLoRA(ctx(t), "contract-a", dir); err != nil {
		t.Fatal(err)
	}
	if ids := listed(t, b.Policy); !slices.Contains(ids, b.Base) || !slices.Contains(ids, "contract-a") {
		t.Errorf("models %q after loading contract-a: want %q and contract-a", ids, b.Base)
	}
	if err := b.Policy.UnloadLoRA(ctx(t), "contract-a"); err != nil {
		t.Fatal(err)
	}
	if ids := listed(t, b.Policy); slices.Contains(ids, "contract-a") {
		t.Errorf("models %q after unloading contract-a still list it", ids)
	}
}

// conformance.md "vLLM: tokenization, models, health, LoRA"
// (/v1/load_lora_adapter, /v1/unload_lora_adapter) and "SGLang: native
// /generate" (lora_path, /load_lora_adapter): an adapter loaded under a
// name is sampled and scored under it.
func loraLoadServeUnload(t *testing.T, b *Backend) {
	dir := b.Adapter(t) // before ctx: making it may take most of a call's budget
	if err := b.Policy.LoadLoRA(ctx(t), "contract-a", dir); err != nil {
		t.Fatal(err)
	}
	c, err := b.Policy.Complete(ctx(t), policy.CompletionRequest{Model: "contract-a", Prompt: b.Prompt, MaxTokens: 8,
		Sampling: policy.Neutral(), Seed: seed(3)})
	if err != nil {
		t.Fatal(err)
	}
	checkCompletion(t, c)
	if lps, err := b.Policy.Score(ctx(t), "contract-a", b.Prompt); err != nil || len(lps) != len(b.Prompt) {
		t.Fatalf("score under the adapter: %d logprobs, %v", len(lps), err)
	}
	if err := b.Policy.UnloadLoRA(ctx(t), "contract-a"); err != nil {
		t.Fatal(err)
	}
}

// conformance.md "vLLM: tokenization, models, health, LoRA" (400 "has
// already been loaded") and "SGLang: renames, failed loads, LoRA
// refusals" (400 "because it is already loaded"): policy.AlreadyLoaded.
func loraTwice(t *testing.T, b *Backend) {
	dir := b.Adapter(t)
	if err := b.Policy.LoadLoRA(ctx(t), "contract-a", dir); err != nil {
		t.Fatal(err)
	}
	err := b.Policy.LoadLoRA(ctx(t), "contract-a", dir)
	if err == nil || !policy.AlreadyLoaded(err) {
		t.Fatalf("second load: %v, want policy.AlreadyLoaded", err)
	}
	if errors.Is(err, b.ErrLoRADisabled) || policy.ReplicaDown(err) {
		t.Errorf("second load: %v taken for LoRA disabled or a replica down", err)
	}
}

// conformance.md "vLLM: tokenization, models, health, LoRA" (404 "No
// adapter found", 400 engine failures) and "SGLang: native /generate"
// (/load_lora_adapter 400): a failed load is an error, not "already
// loaded", not LoRA off, and serves nothing under the name.
func loraMissing(t *testing.T, b *Backend) {
	err := b.Policy.LoadLoRA(ctx(t), "contract-a", t.TempDir())
	if err == nil {
		t.Fatal("loading an empty directory succeeded")
	}
	if policy.AlreadyLoaded(err) || errors.Is(err, b.ErrLoRADisabled) {
		t.Errorf("failed load: %v taken for already loaded or LoRA disabled", err)
	}
	if ids := listed(t, b.Policy); slices.Contains(ids, "contract-a") {
		t.Errorf("models %q list the adapter that failed to load", ids)
	}
}

// conformance.md "vLLM: tokenization, models, health, LoRA" (unload of an
// unknown name: 404 "cannot be found") and "SGLang: renames, failed loads,
// LoRA refusals" (400 "does not exist"): a refusal the LoRA sync meets on
// every new name and ignores; it must not read as LoRA being off.
func loraUnloadUnknown(t *testing.T, b *Backend) {
	err := b.Policy.UnloadLoRA(ctx(t), "contract-never-loaded")
	if err == nil {
		t.Fatal("unloading a name never loaded succeeded")
	}
	if errors.Is(err, b.ErrLoRADisabled) || policy.AlreadyLoaded(err) {
		t.Errorf("unload of an unknown name: %v taken for LoRA disabled or already loaded", err)
	}
}

// conformance.md "vLLM: sampling and scoring" (model: 404 "does not
// exist") and "SGLang: renames, failed loads, LoRA refusals" (400 "has
// never been loaded"): policy.ReplicaDown, so the replica is drained and
// restored with its adapters.
func unknownModel(t *testing.T, b *Backend) {
	_, err := b.Policy.Complete(ctx(t), policy.CompletionRequest{Model: "contract-never-loaded", Prompt: b.Prompt, MaxTokens: 4,
		Sampling: policy.Neutral(), Seed: seed(4)})
	if b.UnknownModelRefused != nil {
		if !errors.Is(err, b.UnknownModelRefused) || policy.ReplicaDown(err) {
			t.Fatalf("complete with a model never loaded: %v, want an error wrapping %v, not a replica down", err, b.UnknownModelRefused)
		}
		return
	}
	if err == nil || !policy.ReplicaDown(err) {
		t.Fatalf("complete with a model never loaded: %v, want policy.ReplicaDown", err)
	}
}

// conformance.md "vLLM: tokenization, models, health, LoRA" (the LoRA
// routes exist only with VLLM_ALLOW_RUNTIME_LORA_UPDATING) and "SGLang:
// native /generate" (a refusal naming --enable-lora, or a missing route).
func loraDisabled(t *testing.T, b *Backend) {
	if b.NoLoRA == nil {
		t.Skip("the backend cannot start a server with LoRA off")
	}
	p := b.NoLoRA(t)
	dir := b.Adapter(t) // before ctx: making it may take most of a call's budget
	if err := p.LoadLoRA(ctx(t), "contract-a", dir); !errors.Is(err, b.ErrLoRADisabled) {
		t.Errorf("load with LoRA off: %v, want an error wrapping %v", err, b.ErrLoRADisabled)
	}
	if err := p.UnloadLoRA(ctx(t), "contract-a"); !errors.Is(err, b.ErrLoRADisabled) {
		t.Errorf("unload with LoRA off: %v, want an error wrapping %v", err, b.ErrLoRADisabled)
	}
}

// conformance.md "vLLM: tokenization, models, health, LoRA; SGLang: weight
// reload" and "SGLang: renames, failed loads, LoRA refusals": a disk load
// succeeds and SGLang then serves the path; a refused load is an error
// with the server's message; stock vLLM has no route.
func weightsFromDisk(t *testing.T, b *Backend) {
	if b.Weights == nil {
		err := b.Policy.UpdateWeightsFromDisk(ctx(t), t.TempDir())
		if !errors.Is(err, policy.ErrWeightsFromDiskUnsupported) {
			t.Fatalf("update weights from disk: %v, want an error wrapping policy.ErrWeightsFromDiskUnsupported", err)
		}
		t.Skip("the server has no /update_weights_from_disk (sync.kind sglang_disk needs SGLang)")
	}
	dir := b.Weights(t)
	if err := b.Policy.UpdateWeightsFromDisk(ctx(t), dir); err != nil {
		t.Fatal(err)
	}
	if ids := listed(t, b.Policy); !slices.Contains(ids, dir) {
		t.Errorf("models %q after loading %s: want the loaded path (SGLang renames the served model)", ids, dir)
	}
	// The program keeps sampling under policy.model: the client maps it
	// to the served weights whatever name the server reports.
	c, err := b.Policy.Complete(ctx(t), policy.CompletionRequest{Model: b.Base, Prompt: b.Prompt, MaxTokens: 4, Sampling: policy.Neutral(), Seed: seed(5)})
	if err != nil {
		t.Fatal(err)
	}
	checkCompletion(t, c)
	err = b.Policy.UpdateWeightsFromDisk(ctx(t), t.TempDir())
	if err == nil || errors.Is(err, policy.ErrWeightsFromDiskUnsupported) {
		t.Errorf("loading an empty directory: %v, want a refusal", err)
	}
	if err := b.Policy.UpdateWeightsFromDisk(ctx(t), b.Base); err != nil {
		t.Fatalf("reloading the base model: %v", err)
	}
	if ids := listed(t, b.Policy); !slices.Contains(ids, b.Base) {
		t.Errorf("models %q after reloading the base model: want %q", ids, b.Base)
	}
}

// The transport's retry rule (clients/transport checkRetry: connection
// errors, 408, 429 and 5xx but 501 are retried up to Retries; conformance.md
// "vLLM: tokenization, models, health, LoRA": an older vLLM's 500 is
// retried, then failed): a call meeting Retries faults succeeds.
func faultsRetried(t *testing.T, b *Backend) {
	for _, kind := range []string{"503", "reset"} {
		before := b.Requests(b.CompletePath)
		b.Fault(b.CompletePath, b.Retries, kind)
		c, err := b.Policy.Complete(ctx(t), policy.CompletionRequest{Model: b.Base, Prompt: b.Prompt, MaxTokens: 4,
			Sampling: policy.Neutral(), Seed: seed(6)})
		if err != nil {
			t.Fatalf("%d %s faults with %d retries: %v", b.Retries, kind, b.Retries, err)
		}
		checkCompletion(t, c)
		if n := b.Requests(b.CompletePath) - before; n != b.Retries+1 {
			t.Errorf("%s: %d requests, want %d", kind, n, b.Retries+1)
		}
	}
}

// policy.ReplicaDown's contract: a replica still failing after the
// transport's retries (503, connection errors) is down, so the caller uses
// another one. A reset of a kept-alive connection is sent once more on a
// new connection before it counts as an attempt (clients/transport h1.go),
// so one reset more is armed than the retries could take.
func faultsExhausted(t *testing.T, b *Backend) {
	for _, kind := range []string{"503", "reset"} {
		t.Run(kind, func(t *testing.T) {
			n := b.Retries + 1
			if kind == "reset" {
				n++
			}
			b.Fault(b.CompletePath, n, kind)
			_, err := b.Policy.Complete(ctx(t), policy.CompletionRequest{Model: b.Base, Prompt: b.Prompt, MaxTokens: 4,
				Sampling: policy.Neutral(), Seed: seed(7)})
			if err == nil {
				t.Fatalf("%d %s faults with %d retries: the call succeeded", n, kind, b.Retries)
			}
			if !policy.ReplicaDown(err) {
				// A connection closed without an answer ends in EOF: a
				// replica down too (it failed the suite before
				// ReplicaDown took EOF).
				t.Errorf("%d %s faults with %d retries: %v, want policy.ReplicaDown", n, kind, b.Retries, err)
			}
		})
	}
}

// conformance.md "vLLM: sampling and scoring" (ranges: 400) and "SGLang:
// native /generate" (verify: 400): a refusal is sent once and is not a
// replica down.
func refusalNotRetried(t *testing.T, b *Backend) {
	req := policy.CompletionRequest{Model: b.Base, Prompt: b.Prompt, MaxTokens: 4, Sampling: policy.Neutral(), Seed: seed(8)}
	if b.Refuse != nil {
		b.Refuse(&req)
	} else {
		req.Temperature = -1
	}
	// A first call may set up what requests need (a sampling session).
	if b.Refuse != nil {
		if _, err := b.Policy.Complete(ctx(t), policy.CompletionRequest{Model: b.Base, Prompt: b.Prompt, MaxTokens: 1, Sampling: policy.Neutral(), Seed: seed(8)}); err != nil {
			t.Fatal(err)
		}
	}
	before := b.Requests(b.CompletePath)
	_, err := b.Policy.Complete(ctx(t), req)
	if err == nil {
		t.Fatalf("the refused request %+v was accepted", req)
	}
	if policy.ReplicaDown(err) {
		t.Errorf("a refusal taken for a replica down: %v", err)
	}
	if n := b.Requests(b.CompletePath) - before; n != 1 {
		t.Errorf("the refused request was sent %d times, want once", n)
	}
}
