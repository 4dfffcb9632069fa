package doctor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/tinker"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/recipes"
)

// Doctor's rows for a Tinker policy (policy.server tinker): the server's
// health and capabilities, a one-token asample that returns ids and
// logprobs, prompt_logprobs, and the local tokenizer against what the
// server samples (Tinker has no tokenizer route: the sampled ids must be
// in the local vocabulary, read back to the same ids, and end at the
// local tokenizer's end token).

// tinkerProbe is the chat-templated question doctor samples from.
const tinkerProbe = "Who composed the opera Carmen? Answer in one short sentence."

// fsdpBaseRefusal is SkyRL's FSDP and Megatron backends' refusal of a
// sample without a model id (skyrl_train_backend.py sample).
const fsdpBaseRefusal = "Sampling requested for unknown model_id(s)"

// tinkerPolicy checks one Tinker policy server.
func (c *checker) tinkerPolicy(ctx context.Context, p *tinker.Client) replicaChecks {
	rc := replicaChecks{url: p.URL(), tinker: true}
	add := func(name string, st CheckStatus, detail, fix string) {
		rc.checks = append(rc.checks, Check{Role: "policy", Server: rc.url, Name: name, Status: st, Detail: detail, Fix: fix})
	}
	names := []string{"capabilities", "sample", "prompt logprobs", localTokenizerRow}
	cctx, cancel := c.bounded(ctx)
	err := p.Health(cctx)
	cancel()
	if err != nil {
		add("health", CheckFail, "GET /api/v1/healthz: "+reason(err),
			"check the Tinker server's URL (policy.urls, trainer.url) and that it is up; for the hosted service, the URL its documentation gives")
		c.unreached(&rc, names, "the server did not answer GET /api/v1/healthz")
		return rc
	}
	rc.reached = true
	add("health", CheckOK, "GET /api/v1/healthz answered", "")
	cctx, cancel = c.bounded(ctx)
	models, err := p.Models(cctx)
	cancel()
	switch {
	case err != nil:
		add("capabilities", CheckFail, "GET /api/v1/get_server_capabilities: "+reason(err), "the server must answer get_server_capabilities (the Tinker API's)")
	case !slices.Contains(models, c.r.Policy.Model):
		add("capabilities", CheckFail, fmt.Sprintf("does not list %q (it lists %s)", c.r.Policy.Model, listOrNone(models)),
			"set policy.model and trainer.base_model to a model the server lists")
	default:
		add("capabilities", CheckOK, "lists "+c.r.Policy.Model, "")
	}
	if c.r.Sync.Kind == recipes.SyncTinker {
		rc.checks = append(rc.checks, c.samplingSlots(ctx, p))
	}
	if !c.full {
		return rc
	}
	tok, tokErr := c.deps.LocalTokenizer()
	if tokErr != nil {
		add("sample", CheckSkip, "no local tokenizer to build the prompt (see the local tokenizer row)", "")
		add("prompt logprobs", CheckSkip, "no local tokenizer to build the prompt", "")
		ch, _ := c.missingLocalTokenizer(rc.url)
		rc.checks = append(rc.checks, ch)
		return rc
	}
	prompt := tok.Vocab.AppendEncode(nil, tok.Chat([]policy.Message{{Role: "user", Content: tinkerProbe}}, true))
	seed := int64(1)
	cctx, cancel = c.bounded(ctx)
	comp, err := p.Complete(cctx, policy.CompletionRequest{Model: c.r.Policy.Model, Prompt: prompt, MaxTokens: 48,
		Sampling: policy.Greedy(), Seed: &seed})
	cancel()
	baseRefused := err != nil && strings.Contains(err.Error(), fsdpBaseRefusal)
	switch {
	case baseRefused && c.r.Sync.Kind == recipes.SyncTinker:
		note := "the server does not sample the base model itself (SkyRL's FSDP or Megatron backend); the run samples it through an ephemeral save of its new model, which this check cannot make without creating one"
		add("sample", CheckOK, note, "")
		add("prompt logprobs", CheckSkip, note, "")
		add(localTokenizerRow, CheckSkip, note, "")
		return rc
	case err != nil:
		add("sample", CheckFail, "asample of 48 tokens: "+reason(err), tinkerFix(err))
		add("prompt logprobs", CheckSkip, "the sample failed", "")
		add(localTokenizerRow, CheckSkip, "the sample failed", "")
		return rc
	default:
		add("sample", CheckOK, fmt.Sprintf("asample returned %d ids with logprobs (finish %s)", len(comp.TokenIDs), comp.FinishReason), "")
	}
	cctx, cancel = c.bounded(ctx)
	lps, err := p.Score(cctx, c.r.Policy.Model, prompt)
	cancel()
	switch {
	case err != nil:
		add("prompt logprobs", CheckFail, "asample with prompt_logprobs: "+reason(err),
			"the server must return prompt_logprobs (SkyRL's JAX backend needs a version with them; its limitations page predates them)")
	case slices.ContainsFunc(lps[1:], func(x float64) bool { return !(x <= 0) || math.IsInf(x, 0) }):
		add("prompt logprobs", CheckFail, "prompt_logprobs has values that are not finite logprobs", "")
	default:
		add("prompt logprobs", CheckOK, fmt.Sprintf("%d prompt logprobs for %d tokens", len(lps)-1, len(prompt)), "")
	}
	rc.checks = append(rc.checks, tinkerTokenizerCheck(rc.url, tok, comp))
	return rc
}

// TinkerSampling is how a Tinker server that trains the policy (sync.kind
// tinker) samples a model's sampler checkpoints: what the run may ask of
// it (ProbeTinkerSampling).
type TinkerSampling int

const (
	// TinkerOwnSessions: each sampling session samples the weights it was
	// made over (the hosted service, as documented; not seen running).
	TinkerOwnSessions TinkerSampling = iota
	// TinkerSharedSlot: SkyRL's JAX backend. A model's sampler checkpoints
	// are loaded, when sampled, into the adapter slot the model trains
	// (backends/jax.py load_sampler_checkpoint; seen running, sim/real):
	// sampling an older checkpoint rolls the training weights back. The
	// base model is sampled from a slot of its own, and a fresh LoRA
	// (lora_B zero) is the base model.
	TinkerSharedSlot
	// TinkerOneVersion: SkyRL's FSDP and Megatron backends. Their
	// inference engines hold the newest saved weights, which every
	// sampling session samples, and a sample without a model (the base
	// model) is refused.
	TinkerOneVersion
)

// String names the behaviour and the servers that have it.
func (k TinkerSampling) String() string {
	switch k {
	case TinkerSharedSlot:
		return "one slot per model, shared by its training and its sampler checkpoints (SkyRL's JAX backend)"
	case TinkerOneVersion:
		return "the newest saved weights in every session, no base-model sampling (SkyRL's FSDP or Megatron backend)"
	}
	return "each session its own weights (the hosted service)"
}

// ProbeTinkerSampling tells a Tinker policy server's TinkerSampling: the
// hosted service by its URL, SkyRL's backends by a one-token sample of
// the base model (policy.model), which the FSDP and Megatron backends
// refuse with "Sampling requested for unknown model_id(s)".
func ProbeTinkerSampling(ctx context.Context, r *recipes.Recipe, p policy.Policy, tok *roles.Tokenizer) (TinkerSampling, error) {
	return probeSampling(ctx, r.Policy.Model, p, tok)
}

// probeSampling is ProbeTinkerSampling with base the base model sampled.
func probeSampling(ctx context.Context, base string, p policy.Policy, tok *roles.Tokenizer) (TinkerSampling, error) {
	if strings.Contains(p.URL(), HostedTinkerHost) {
		return TinkerOwnSessions, nil
	}
	if tok == nil {
		return 0, errors.New("no local tokenizer to build the probe")
	}
	prompt := tok.Vocab.AppendEncode(nil, tok.Chat([]policy.Message{{Role: "user", Content: tinkerProbe}}, true))
	seed := int64(1)
	_, err := p.Complete(ctx, policy.CompletionRequest{Model: base, Prompt: prompt, MaxTokens: 1, Sampling: policy.Greedy(), Seed: &seed})
	switch {
	case err != nil && strings.Contains(err.Error(), fsdpBaseRefusal):
		return TinkerOneVersion, nil
	case err != nil:
		return 0, err
	}
	return TinkerSharedSlot, nil
}

// samplingSlots is the "sampling slots" row of sync.kind tinker: how the
// server samples (ProbeTinkerSampling) against what the recipe asks. Off
// the policy (train.max_off_policy_steps above 0) a step samples weights
// older than the ones being trained, which SkyRL's JAX backend would load
// into the training slot (rolling the training back: source audit B1) and
// its FSDP backend cannot serve at all; hindsight.teacher initial needs the
// initial weights served all run long, which FSDP cannot (B2) and JAX
// serves from the base model.
func (c *checker) samplingSlots(ctx context.Context, p policy.Policy) Check {
	ch := Check{Role: "policy", Server: p.URL(), Name: "sampling slots"}
	tok, err := c.deps.LocalTokenizer()
	if err != nil {
		ch.Status, ch.Detail = CheckSkip, "no local tokenizer to build the probe (see the local tokenizer row)"
		return ch
	}
	cctx, cancel := c.bounded(ctx)
	kind, err := ProbeTinkerSampling(cctx, c.r, p, tok)
	cancel()
	if err != nil {
		ch.Status, ch.Detail, ch.Fix = CheckFail, "a one-token sample of the base model: "+reason(err), tinkerFix(err)
		return ch
	}
	initial := c.r.Hindsight.Enabled && c.r.Hindsight.Teacher == recipes.TeacherInitial && !c.r.TeacherOnReferences()
	reference := c.r.KLOnPolicyServers()
	off := c.r.Train.MaxOffPolicySteps
	ch.Status, ch.Detail = CheckOK, kind.String()
	switch {
	case kind == TinkerSharedSlot && off > 0:
		ch.Status = CheckFail
		ch.Detail += fmt.Sprintf(": with train.max_off_policy_steps %d a step samples a checkpoint older than the one being trained, which this backend loads into the training slot, rolling the training back (docs/conformance.md, B1)", off)
		ch.Fix = "set train.max_off_policy_steps: 0, or sample the policy with vLLM (policy.server vllm, sync.kind lora)"
	case kind == TinkerOneVersion && off > 0:
		ch.Status = CheckFail
		ch.Detail += fmt.Sprintf(": with train.max_off_policy_steps %d a step would sample older weights, which this backend no longer holds (it samples the newest)", off)
		ch.Fix = "set train.max_off_policy_steps: 0, or sample the policy with vLLM or SGLang replicas"
	case kind == TinkerOneVersion && initial:
		ch.Status = CheckFail
		ch.Detail += ": hindsight.teacher initial needs the initial weights served all run long, and this backend samples only the newest (docs/conformance.md, B2)"
		ch.Fix = "name reference servers of the initial weights (reference.urls: they score the teacher), or use hindsight.teacher: self, or the JAX backend, or vLLM replicas that keep the base model served (policy.server vllm, sync.kind lora)"
	case kind == TinkerOneVersion && reference:
		ch.Status = CheckFail
		ch.Detail += fmt.Sprintf(": trainer.kl_coef %g scores every trajectory under the initial weights, and this backend samples only the newest", c.r.Trainer.KLCoef)
		ch.Fix = "name reference servers serving the initial weights (reference.urls), or sample the policy with vLLM replicas that keep the base model served (policy.server vllm, sync.kind lora)"
	case kind == TinkerSharedSlot && (initial || reference):
		ch.Detail += "; the initial weights (hindsight.teacher initial, trainer.kl_coef's reference) are served by base-model sampling sessions (a fresh LoRA is the base model), never by the model's own checkpoints"
	}
	return ch
}

// tinkerTokenizerCheck holds the local tokenizer to what the server
// sampled: every id in the local vocabulary, the ids' text encoding back
// to the same ids, and a stop at an end token being the local end
// token's id.
func tinkerTokenizerCheck(url string, tok *roles.Tokenizer, comp *policy.Completion) Check {
	ch := Check{Role: "policy", Server: url, Name: localTokenizerRow}
	fix := "point policy.tokenizer at the tokenizer.json of policy.model (the one the server loads); the program reproduces the Qwen2.5 and Qwen3 tokenizers"
	var text []byte
	for i, id := range comp.TokenIDs {
		b, ok := tok.Vocab.TokenBytes(id)
		if !ok {
			ch.Status, ch.Detail, ch.Fix = CheckFail, fmt.Sprintf("sampled id %d (token %d) is not in the local tokenizer (%s)", id, i, tok.Source), fix
			return ch
		}
		text = append(text, b...)
	}
	if comp.StopTokenID != nil {
		want := tok.Vocab.AppendEncode(nil, roles.QwenEndTokens[0])
		if len(want) != 1 || want[0] != *comp.StopTokenID {
			ch.Status, ch.Detail, ch.Fix = CheckFail, fmt.Sprintf("the server stopped at id %d, the local tokenizer's %s is %v", *comp.StopTokenID, roles.QwenEndTokens[0], want), fix
			return ch
		}
	}
	again := tok.Vocab.AppendEncode(nil, string(text))
	if !slices.Equal(again, comp.TokenIDs) {
		// A model may sample a non-canonical split; the vocabulary agrees.
		ch.Status, ch.Detail = CheckWarn, fmt.Sprintf("the %d sampled ids read back as %d ids locally (%s): a non-canonical split, or a different tokenizer", len(comp.TokenIDs), len(again), tokenDiff(comp.TokenIDs, again))
		ch.Fix = fix
		return ch
	}
	ch.Status, ch.Detail = CheckOK, fmt.Sprintf("the %d sampled ids are local ids and read back to themselves (%s)", len(comp.TokenIDs), tok.Source)
	return ch
}

// tinkerFix says what to do about a failed asample.
func tinkerFix(err error) string {
	switch e := err.Error(); {
	case strings.Contains(e, "401") || strings.Contains(e, "403"):
		return "the server refused the key: export the variable trainer.api_key_env names (for the hosted service, TINKER_API_KEY)"
	case strings.Contains(e, "decode"):
		return "the server answered a result this client cannot read: try policy.tinker_results: protobuf (what the Tinker SDK asks for)"
	}
	return "see the server's answer above; docs/conformance.md (Tinker sampling) lists what each server refuses"
}

// TrainerBackend resolves trainer.backend, the loss aggregation the
// trainer computes by itself: a recipe's own value; for an embedded
// trainer the simulated one's (sim.trainer.backend); the hosted service
// by its URL; otherwise SkyRL's backend told by a one-token sample of
// trainer.base_model through the trainer's sampling routes
// (deps.TrainerSampler), which its JAX backend answers and its FSDP and
// Megatron backends refuse.
func TrainerBackend(ctx context.Context, r *recipes.Recipe, deps roles.Deps) (string, error) {
	switch {
	case r.Trainer.Backend != recipes.BackendAuto:
		return r.Trainer.Backend, nil
	case r.Trainer.URL == recipes.Embedded && r.Sim.Trainer.Backend == recipes.SimBackendFSDP:
		return recipes.BackendSkyRLFSDP, nil
	case r.Trainer.URL == recipes.Embedded:
		return recipes.BackendSkyRLJAX, nil
	case strings.Contains(r.Trainer.URL, HostedTinkerHost):
		return recipes.BackendHosted, nil
	case deps.TrainerSampler == nil:
		return "", errors.New("trainer.backend auto: no sampling client on the trainer to tell its backend")
	}
	tok, err := deps.LocalTokenizer()
	if err != nil {
		return "", fmt.Errorf("trainer.backend auto: %w", err)
	}
	kind, err := probeSampling(ctx, r.Trainer.BaseModel, deps.TrainerSampler, tok)
	if err != nil {
		return "", fmt.Errorf("trainer.backend auto: a one-token sample of %s on %s: %w", r.Trainer.BaseModel, r.Trainer.URL, err)
	}
	if kind == TinkerOneVersion {
		return recipes.BackendSkyRLFSDP, nil
	}
	return recipes.BackendSkyRLJAX, nil
}
