package recipes

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
)

// Problem is one thing wrong with a recipe, at one key path.
type Problem struct {
	// Key is the key path, e.g. "train.group_size", "train.data[0]" or
	// "eval.datasets.nq" (empty when the problem has no single key).
	Key string
	// Message says what is wrong, e.g. "must be at least 2".
	Message string
	// Line is the line of the key in the recipe file, or 0 when unknown.
	Line int
}

// String renders p as "KEY: MESSAGE", or `unknown key "KEY"` for a key
// the schema lacks, followed by " (line N)" when the line is known.
func (p Problem) String() string {
	s := p.Key + ": " + p.Message
	switch {
	case p.Message == msgUnknownKey:
		s = fmt.Sprintf("unknown key %q", p.Key)
	case p.Key == "":
		s = p.Message
	}
	if p.Line > 0 {
		s += fmt.Sprintf(" (line %d)", p.Line)
	}
	return s
}

// Problems is the error of Validate (every problem found, in schema order)
// and of Load for the file's unknown keys and values of the wrong type
// (every one, in file order, with lines).
type Problems []Problem

// Error renders one problem on one line, and several as a count followed
// by one tab-indented line each.
func (ps Problems) Error() string {
	if len(ps) == 1 {
		return ps[0].String()
	}
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = "\t" + p.String()
	}
	return fmt.Sprintf("%d problems:\n%s", len(ps), strings.Join(lines, "\n"))
}

// Validate checks every key and returns nil or a Problems error listing
// every problem, each naming its key path. It checks: the name (letters,
// digits, '_', '.', '-'; not "." or ".."); the enumerated keys (trainer.loss,
// sync.kind, hindsight.loss, hindsight.broadcast, rollout.schedule,
// sim.trainer.archive); that
// counts, sizes and token limits are positive (sync.keep only for sync.kind
// lora); that trainer.lora_rank is at least 0 and matches sync.kind (0,
// full fine-tuning, with sglang_disk or none; a LoRA rank with lora or
// none); that with sync.kind sglang_disk (one weights version per replica,
// replaced in place) train.max_off_policy_steps is 0 and hindsight.teacher
// is not initial while the OPD term is on; the enumerated judge.api and
// judge.max_tokens_field; numeric ranges (temperatures in [0, 2], top_p in
// (0,1], top_k -1 or >= 1, min_p in [0, 1], repetition penalties > 0,
// presence and frequency penalties in [-2, 2] (vLLM's ranges; also for
// sim.generation_config, whose top_k may be 0 and max_new_tokens 0 for
// unset), coef >= 0, clamp > 0, learning_rate > 0,
// 0 < clip_low <= 1 <= clip_high, betas in [0,1), eps > 0, sim.epsilon in
// [0,1)); that every URL is "embedded" or an http(s) URL with a host and
// that policy.urls is not empty; that api_key_env values are variable
// names; that hindsight.hint_template contains {critique}; and that the
// files exist: every train.data entry (at least one is required), every
// eval.datasets value, and retriever.corpus when the retriever or the judge
// is embedded (both read it). Relative paths are taken from the current
// directory, so validate a recipe after Load has resolved it.
//
// Validate does not know which command will use the recipe: sync.kind none
// passes it, and a command that trains must also call ValidateTraining.
func (r *Recipe) Validate() error {
	var ps Problems
	r.missingData = nil
	bad := func(key, format string, args ...any) {
		ps = append(ps, Problem{Key: key, Message: fmt.Sprintf(format, args...)})
	}
	atLeast := func(key string, v, min int) {
		if v < min {
			bad(key, "must be at least %d, got %d", min, v)
		}
	}
	// The comparisons are written so that NaN fails them.
	nonNeg := func(key string, v float64) {
		if !(v >= 0) {
			bad(key, "must be at least 0, got %g", v)
		}
	}
	positive := func(key string, v float64) {
		if !(v > 0) {
			bad(key, "must be greater than 0, got %g", v)
		}
	}
	unit := func(key string, v float64) { // [0,1)
		if !(v >= 0 && v < 1) {
			bad(key, "must be in [0, 1), got %g", v)
		}
	}
	// Sampling ranges, as vLLM's SamplingParams checks them.
	temperature := func(key string, v float64) {
		if !(v >= 0 && v <= 2) {
			bad(key, "must be in [0, 2], got %g", v)
		}
	}
	minP := func(key string, v float64) {
		if !(v >= 0 && v <= 1) {
			bad(key, "must be in [0, 1] (0: off), got %g", v)
		}
	}
	repetition := func(key string, v float64) {
		if !(v > 0 && !math.IsInf(v, 0)) {
			bad(key, "must be a number greater than 0 (1: off), got %g", v)
		}
	}
	penalty := func(key string, v float64) {
		if !(v >= -2 && v <= 2) {
			bad(key, "must be in [-2, 2] (0: off), got %g", v)
		}
	}
	oneOf := func(key, v string, allowed ...string) {
		if !slices.Contains(allowed, v) {
			bad(key, "must be one of %s, got %q", strings.Join(allowed, ", "), v)
		}
	}
	nonEmpty := func(key, v string) {
		if strings.TrimSpace(v) == "" {
			bad(key, "must not be empty")
		}
	}
	endpoint := func(key, v string) {
		if msg := checkURL(v); msg != "" {
			bad(key, "%s", msg)
		}
	}
	envName := func(key, v string) {
		if v != "" && !envNameRE.MatchString(v) {
			bad(key, "must name an environment variable (letters, digits, '_'), got %q", v)
		}
	}
	file := func(key, p string) {
		if p == "" {
			bad(key, "must name a file")
			return
		}
		if msg := checkFile(p); msg != "" {
			if b, ok := r.dataRefs[p]; ok {
				// Not a problem of the recipe: of this machine, until
				// the bundle is fetched (MissingData; run and doctor
				// refuse to start without it).
				r.missingData = append(r.missingData, Problem{Key: key,
					Message: fmt.Sprintf("%s: %s: the %s bundle is not on disk: run `orchestrate data get %s`", p, msg, b, b)})
				return
			}
			bad(key, "%s: %s", p, msg)
		}
	}

	// A built-in tokenizer is one model family's: the model must be of it.
	builtinTokenizer := func(key, tk, model string) {
		m := strings.ToLower(model)
		fam := "Qwen/Qwen2.5-*"
		ok := strings.Contains(m, "qwen2.5")
		if tk == TokenizerQwen3 {
			fam, ok = "Qwen/Qwen3-*", strings.Contains(m, "qwen3-")
		}
		if !ok {
			bad(key, "%q is the %s family's tokenizer, and the model is %q: name that model's tokenizer.json, or %q", tk, fam, model, TokenizerAuto)
		}
	}

	if !nameRE.MatchString(r.Name) || r.Name == "." || r.Name == ".." {
		bad("name", "must be letters, digits, '_', '.' or '-', got %q", r.Name)
	}

	if len(r.Policy.URLs) == 0 {
		bad("policy.urls", "must list at least one URL (or %q)", Embedded)
	}
	for i, u := range r.Policy.URLs {
		endpoint(fmt.Sprintf("policy.urls[%d]", i), u)
	}
	nonEmpty("policy.model", r.Policy.Model)
	atLeast("policy.concurrency", r.Policy.Concurrency, 1)
	switch tk := r.Policy.Tokenizer; {
	case tk == "":
		bad("policy.tokenizer", "must be %q, %q, %q, %q or a tokenizer.json file", TokenizerAuto, TokenizerSim, TokenizerQwen25, TokenizerQwen3)
	case (tk == TokenizerQwen25 || tk == TokenizerQwen3) && !slices.ContainsFunc(r.Policy.URLs, func(u string) bool { return u != Embedded }):
		bad("policy.tokenizer", "%s with only embedded policies: the simulator tokenizes with its own vocabulary; set %q", tk, TokenizerAuto)
	case tk == TokenizerQwen25 || tk == TokenizerQwen3:
		builtinTokenizer("policy.tokenizer", tk, r.Policy.Model)
	case tk == TokenizerAuto || tk == TokenizerSim:
	case !slices.ContainsFunc(r.Policy.URLs, func(u string) bool { return u != Embedded }):
		bad("policy.tokenizer", "a file (%s) with only embedded policies: the simulator tokenizes with its own vocabulary; set %q", tk, TokenizerAuto)
	default:
		file("policy.tokenizer", tk)
	}
	oneOf("policy.tokenize", r.Policy.Tokenize, TokenizeServer, TokenizeLocal)
	oneOf("policy.server", r.Policy.Server, ServerVLLM, ServerSGLang, ServerTinker)
	oneOf("policy.tinker_results", r.Policy.TinkerResults, TinkerResultsJSON, TinkerResultsProtobuf)
	oneOf("policy.affinity", r.Policy.Affinity, AffinityTrajectory, AffinityGroup, AffinityNone)
	if r.Policy.EndpointsFile != "" && r.Policy.Server == ServerTinker {
		bad("policy.endpoints_file", "not with policy.server %s: a Tinker server samples its own weights behind one URL", ServerTinker)
	}
	atLeast("policy.affinity_margin", r.Policy.AffinityMargin, 1)
	if u := r.Policy.RouterURL; u != "" {
		switch {
		case u == Embedded:
			bad("policy.router_url", "must be the URL of a vllm-router in front of policy.urls (there is no embedded router)")
		case r.Policy.Server == ServerSGLang:
			bad("policy.router_url", "not with policy.server %s: vllm-router's /generate drops logprob_start_len, top_logprobs_num, lora_path and the sampling seed, which scoring and sampling need; list the servers in policy.urls", ServerSGLang)
		case r.Policy.Server == ServerTinker:
			bad("policy.router_url", "not with policy.server %s: a Tinker server samples its own weights behind one URL", ServerTinker)
		default:
			endpoint("policy.router_url", u)
		}
		if r.Sync.Kind == SyncSGLangDisk {
			bad("policy.router_url", "not with sync.kind %s (SGLang servers)", SyncSGLangDisk)
		}
	}
	if r.Policy.Server == ServerSGLang && r.Policy.Tokenize != TokenizeLocal {
		bad("policy.server", "%q needs policy.tokenize %q (SGLang's /tokenize applies no chat template), got policy.tokenize %q", ServerSGLang, TokenizeLocal, r.Policy.Tokenize)
	}
	if r.Policy.Server == ServerTinker {
		if r.Policy.Tokenize != TokenizeLocal {
			bad("policy.server", "%q needs policy.tokenize %q (a Tinker server takes token ids and has no tokenizer route), got policy.tokenize %q", ServerTinker, TokenizeLocal, r.Policy.Tokenize)
		}
		if slices.Contains(r.Policy.URLs, Embedded) && r.Trainer.URL != Embedded {
			bad("policy.urls", "%q with policy.server %q is the embedded trainer's sampling routes, so trainer.url must be %q too (got %q); or set policy.urls to the Tinker server's URL",
				Embedded, ServerTinker, Embedded, r.Trainer.URL)
		}
		// Tinker's SamplingParams has temperature, top_k and top_p only.
		t := r.Train
		for _, f := range []struct {
			key      string
			v, unset float64
		}{{"train.min_p", t.MinP, 0}, {"train.repetition_penalty", t.RepetitionPenalty, 1},
			{"train.presence_penalty", t.PresencePenalty, 0}, {"train.frequency_penalty", t.FrequencyPenalty, 0}} {
			if f.v != f.unset {
				bad(f.key, "must be %g with policy.server %q (Tinker's sampling_params has temperature, top_k and top_p only), got %g", f.unset, ServerTinker, f.v)
			}
		}
	}

	endpoint("judge.url", r.Judge.URL)
	nonEmpty("judge.model", r.Judge.Model)
	envName("judge.api_key_env", r.Judge.APIKeyEnv)
	atLeast("judge.max_tokens", r.Judge.MaxTokens, 1)
	temperature("judge.temperature", r.Judge.Temperature)
	atLeast("judge.concurrency", r.Judge.Concurrency, 1)
	oneOf("judge.api", r.Judge.API, JudgeAPIVLLM, JudgeAPIOpenAI, JudgeAPITinker)
	if r.Judge.API == JudgeAPITinker {
		if r.Judge.URL == Embedded {
			bad("judge.api", "%q needs a Tinker server at judge.url (the embedded judge speaks OpenAI's chat API; set judge.api %q)", JudgeAPITinker, JudgeAPIVLLM)
		}
		switch tk := r.Judge.Tokenizer; tk {
		case TokenizerAuto:
		case TokenizerQwen25, TokenizerQwen3:
			builtinTokenizer("judge.tokenizer", tk, r.Judge.Model)
		case "":
			bad("judge.tokenizer", "must be %q or a tokenizer.json file with judge.api %q", TokenizerAuto, JudgeAPITinker)
		default:
			file("judge.tokenizer", tk)
		}
		if r.Judge.MaxTokensField != JudgeMaxTokens {
			bad("judge.max_tokens_field", "must be %q with judge.api %q (sent as sampling_params.max_tokens)", JudgeMaxTokens, JudgeAPITinker)
		}
	}
	oneOf("judge.max_tokens_field", r.Judge.MaxTokensField, JudgeMaxTokens, JudgeMaxCompletionTokens)

	endpoint("retriever.url", r.Retriever.URL)
	if r.Retriever.URL == Embedded || r.Judge.URL == Embedded {
		file("retriever.corpus", r.Retriever.Corpus)
	}
	atLeast("retriever.topk", r.Retriever.TopK, 1)
	if k1 := r.Retriever.BM25K1; !(k1 >= 0) || math.IsInf(k1, 0) {
		bad("retriever.bm25_k1", "must be a number at least 0, got %v", k1)
	}
	if b := r.Retriever.BM25B; !(b >= 0 && b <= 1) {
		bad("retriever.bm25_b", "must be in [0, 1], got %v", b)
	}

	endpoint("trainer.url", r.Trainer.URL)
	envName("trainer.api_key_env", r.Trainer.APIKeyEnv)
	nonEmpty("trainer.base_model", r.Trainer.BaseModel)
	atLeast("trainer.lora_rank", r.Trainer.LoRARank, 0)
	positive("trainer.learning_rate", r.Trainer.LearningRate)
	oneOf("trainer.loss", r.Trainer.Loss, TrainerLossImportanceSampling, TrainerLossPPO)
	if !(r.Trainer.ClipLow > 0 && r.Trainer.ClipLow <= 1) {
		bad("trainer.clip_low", "must be in (0, 1], got %g", r.Trainer.ClipLow)
	}
	if !(r.Trainer.ClipHigh >= 1) {
		bad("trainer.clip_high", "must be at least 1, got %g", r.Trainer.ClipHigh)
	}
	unit("trainer.beta1", r.Trainer.Beta1)
	unit("trainer.beta2", r.Trainer.Beta2)
	positive("trainer.eps", r.Trainer.Eps)
	nonNeg("trainer.weight_decay", r.Trainer.WeightDecay)
	atLeast("trainer.chunk_size", r.Trainer.ChunkSize, 1)
	atLeast("trainer.mini_batch_size", r.Trainer.MiniBatchSize, 0)
	atLeast("trainer.lr_warmup_steps", r.Trainer.LRWarmupSteps, 0)
	oneOf("trainer.loss_agg", r.Trainer.LossAgg, LossAggTokenMean, LossAggSeqMeanTokenMean, LossAggSeqMeanTokenSum, LossAggSum)
	oneOf("trainer.backend", r.Trainer.Backend, BackendAuto, BackendSkyRLJAX, BackendSkyRLFSDP, BackendHosted)
	oneOf("trainer.advantage_std", r.Trainer.AdvantageStd, StdUnbiased, StdPopulation)
	nonNeg("trainer.kl_coef", r.Trainer.KLCoef)
	nonNeg("trainer.entropy_coef", r.Trainer.EntropyCoef)
	if len(r.Reference.URLs) > 0 {
		oneOf("reference.server", r.Reference.Server, ServerVLLM, ServerSGLang)
		for i, u := range r.Reference.URLs {
			if u != Embedded {
				endpoint(fmt.Sprintf("reference.urls[%d]", i), u)
			}
		}
	}
	if r.KLOnPolicyServers() && r.Sync.Kind == SyncSGLangDisk {
		bad("reference.urls", "trainer.kl_coef %g needs the initial weights, which sync.kind %s overwrites on the policy servers: name reference servers serving %s", r.Trainer.KLCoef, SyncSGLangDisk, r.Policy.Model)
	}

	oneOf("sync.kind", r.Sync.Kind, SyncLoRA, SyncSGLangDisk, SyncTinker, SyncNone)
	if r.Sync.Kind == SyncTinker {
		// The sampler weights are the trainer's own: only its server
		// samples them.
		one := len(r.Policy.URLs) == 1 && (r.Policy.URLs[0] == r.Trainer.URL || r.Policy.URLs[0] == Embedded && r.Trainer.URL == Embedded)
		switch {
		case r.Policy.Server != ServerTinker:
			bad("sync.kind", "%q needs policy.server %q (the sampler weights stay on the Tinker server that trains), got policy.server %q", SyncTinker, ServerTinker, r.Policy.Server)
		case !one:
			bad("policy.urls", "must be the trainer's URL alone with sync.kind %q (the Tinker server that trains samples its own weights): set policy.urls: [%s], got %v", SyncTinker, r.Trainer.URL, r.Policy.URLs)
		}
	} else if r.Policy.Server == ServerTinker && r.Sync.Kind != SyncNone {
		bad("sync.kind", "must be %q (or %q for evaluation only) with policy.server %q, got %q", SyncTinker, SyncNone, ServerTinker, r.Sync.Kind)
	}
	// lora_config.rank 0 is full fine-tuning (SkyRL's FSDP and Megatron
	// backends), whose sampler weights are a merged model; a LoRA rank
	// saves an adapter (SkyRL's FSDP backend exports a PEFT model's
	// adapter, not merged weights), which only sync.kind lora loads.
	switch rank := r.Trainer.LoRARank; {
	case rank == 0 && r.Sync.Kind == SyncLoRA:
		bad("trainer.lora_rank", "0 (full fine-tuning) needs a full-weight sync.kind (%s; %s for evaluation only), got sync.kind %s, which loads LoRA adapters: set sync.kind %s, or trainer.lora_rank above 0 to train an adapter",
			SyncSGLangDisk, SyncNone, SyncLoRA, SyncSGLangDisk)
	case rank > 0 && r.Sync.Kind == SyncSGLangDisk:
		bad("trainer.lora_rank", "%d trains a LoRA adapter, which sync.kind %s cannot load (it reloads merged full weights, and a LoRA model's sampler weights are the adapter alone): set trainer.lora_rank: 0 for full fine-tuning, or sync.kind %s",
			rank, SyncSGLangDisk, SyncLoRA)
	}
	if r.Sync.Kind == SyncLoRA {
		atLeast("sync.keep", r.Sync.Keep, 1)
	} else {
		atLeast("sync.keep", r.Sync.Keep, 0)
	}
	// sglang_disk replaces the one weights version a replica serves: it can
	// serve neither older weights (off-policy steps) nor, after the first
	// sync, the initial ones (an initial-policy teacher).
	if r.Sync.Kind == SyncSGLangDisk {
		if r.Train.MaxOffPolicySteps > 0 {
			bad("train.max_off_policy_steps", "must be 0 with sync.kind %s (got %d): a replica serves one weights version, replaced in place; use sync.kind %s for off-policy training",
				SyncSGLangDisk, r.Train.MaxOffPolicySteps, SyncLoRA)
		}
		if h := r.Hindsight; h.Enabled && h.Loss != HindsightLossNone && h.Teacher == TeacherInitial && !r.TeacherOnReferences() {
			bad("hindsight.teacher", "%q needs the initial weights served, which sync.kind %s overwrites on the policy servers after the first sync: name reference servers serving %s (reference.urls; they score the teacher and the KL reference), or use sync.kind %s",
				TeacherInitial, SyncSGLangDisk, r.Policy.Model, SyncLoRA)
		}
	}

	switch s := r.Eval.Subset; s {
	case SubsetFirst, SubsetRandom, SubsetAll:
	case SubsetSearchR1Test, SubsetRand1000:
		// Named for the seven datasets: each name must be one of them.
		for _, name := range slices.Sorted(maps.Keys(r.Eval.Datasets)) {
			if _, ok := SearchR1TestSizes[name]; !ok {
				bad("eval.datasets."+name, "eval.subset %s names the questions of %s only, and not of %q", s, strings.Join(slices.Sorted(maps.Keys(SearchR1TestSizes)), ", "), name)
			} else if s == SubsetRand1000 {
				file("eval.subset", r.Eval.SubsetFiles[name])
			}
		}
	case "":
		bad("eval.subset", "must be %q, %q, %q, %q, %q or a subset manifest file (eval_subset.json)", SubsetFirst, SubsetRandom, SubsetAll, SubsetSearchR1Test, SubsetRand1000)
	default:
		file("eval.subset", s)
	}

	atLeast("checkpoint.every", r.Checkpoint.Every, 1)
	atLeast("checkpoint.keep", r.Checkpoint.Keep, 1)

	atLeast("train.steps", r.Train.Steps, 1)
	atLeast("train.batch_size", r.Train.BatchSize, 1)
	atLeast("train.group_size", r.Train.GroupSize, 2)
	if len(r.Train.Data) == 0 {
		bad("train.data", "must list at least one file")
	}
	for i, p := range r.Train.Data {
		file(fmt.Sprintf("train.data[%d]", i), p)
	}
	temperature("train.temperature", r.Train.Temperature)
	if !(r.Train.TopP > 0 && r.Train.TopP <= 1) {
		bad("train.top_p", "must be in (0, 1], got %g", r.Train.TopP)
	}
	if r.Train.TopK != -1 && r.Train.TopK < 1 {
		bad("train.top_k", "must be -1 (off) or at least 1, got %d", r.Train.TopK)
	}
	minP("train.min_p", r.Train.MinP)
	repetition("train.repetition_penalty", r.Train.RepetitionPenalty)
	if r.Policy.Server == ServerSGLang && !(r.Train.RepetitionPenalty > 0 && r.Train.RepetitionPenalty <= 2) {
		// SamplingParams.verify (sampling/sampling_params.py) refuses it
		// with 400 on every request.
		bad("train.repetition_penalty", "must be in (0, 2] with policy.server %q (SGLang refuses other values), got %g", ServerSGLang, r.Train.RepetitionPenalty)
	}
	penalty("train.presence_penalty", r.Train.PresencePenalty)
	penalty("train.frequency_penalty", r.Train.FrequencyPenalty)

	atLeast("rollout.max_turns", r.Rollout.MaxTurns, 1)
	atLeast("rollout.max_turn_tokens", r.Rollout.MaxTurnTokens, 1)
	atLeast("rollout.max_obs_tokens", r.Rollout.MaxObsTokens, 1)
	atLeast("rollout.max_context_tokens", r.Rollout.MaxContextTokens, 1)

	oneOf("hindsight.loss", r.Hindsight.Loss, HindsightLossClamp, HindsightLossReverseKL, HindsightLossNone)
	oneOf("hindsight.broadcast", r.Hindsight.Broadcast, BroadcastSearch, BroadcastResponse, BroadcastTrajectory, BroadcastEarliest)
	if h := r.Hindsight; h.Enabled && h.Broadcast == BroadcastEarliest && h.Hint == HintSiblings {
		bad("hindsight.broadcast", "%s needs the judge to name the first wrong search, and hindsight.hint %s asks no judge: set hindsight.hint %s, or another broadcast",
			BroadcastEarliest, HintSiblings, HintJudge)
	}
	nonEmpty("hindsight.teacher", r.Hindsight.Teacher)
	nonNeg("hindsight.coef", r.Hindsight.Coef)
	oneOf("hindsight.term_agg", r.Hindsight.TermAgg, TermAggAdvantage, TermAggSearchMean)
	if h := r.Hindsight; h.Enabled && h.TermAgg == TermAggSearchMean && h.Loss == HindsightLossNone {
		bad("hindsight.term_agg", "%s averages the OPD term, and hindsight.loss %s makes none: set hindsight.loss %s (or %s), or hindsight.term_agg %s",
			TermAggSearchMean, HindsightLossNone, HindsightLossClamp, HindsightLossReverseKL, TermAggAdvantage)
	}
	positive("hindsight.clamp", r.Hindsight.Clamp)
	oneOf("hindsight.student_logprobs", r.Hindsight.StudentLogprobs, StudentLogprobsSampled, StudentLogprobsRescored)
	atLeast("hindsight.max_critique_chars", r.Hindsight.MaxCritiqueChars, 1)
	atLeast("hindsight.score_concurrency", r.Hindsight.ScoreConcurrency, 0)
	if !strings.Contains(r.Hindsight.HintTemplate, CritiquePlaceholder) {
		bad("hindsight.hint_template", "must contain %s", CritiquePlaceholder)
	}
	oneOf("hindsight.hint", r.Hindsight.Hint, HintJudge, HintSiblings)
	if r.Hindsight.Hint == HintSiblings {
		if !strings.Contains(r.Hindsight.SiblingsTemplate, SiblingsPlaceholder) {
			bad("hindsight.siblings_template", "must contain %s", SiblingsPlaceholder)
		}
		if r.Hindsight.Enabled && r.Train.GroupSize < 2 {
			bad("hindsight.hint", "%s builds each hint from the other samples of the same question, and train.group_size %d has none: set train.group_size 2 or more, or hindsight.hint %s",
				HintSiblings, r.Train.GroupSize, HintJudge)
		}
	}

	atLeast("eval.every", r.Eval.Every, 1)
	for _, name := range slices.Sorted(maps.Keys(r.Eval.Datasets)) {
		key := "eval.datasets." + name
		if name == "" {
			bad(key, "entry needs a name")
			continue
		}
		file(key, r.Eval.Datasets[name])
	}
	atLeast("eval.per_dataset", r.Eval.PerDataset, 0)
	for _, name := range slices.Sorted(maps.Keys(r.Eval.Sizes)) {
		key := "eval.sizes." + name
		if _, ok := r.Eval.Datasets[name]; !ok {
			bad(key, "names no eval.datasets entry (have %s)", strings.Join(slices.Sorted(maps.Keys(r.Eval.Datasets)), ", "))
			continue
		}
		atLeast(key, r.Eval.Sizes[name], 0)
	}

	nonEmpty("output.dir", r.Output.Dir)
	atLeast("output.trajectories", r.Output.Trajectories, 0)
	atLeast("output.trajectory_steps", r.Output.TrajectorySteps, 0)

	positive("http.timeout_seconds", r.HTTP.TimeoutSeconds)
	atLeast("http.retries", r.HTTP.Retries, 0)
	atLeast("http.retry_wait_min_ms", r.HTTP.RetryWaitMinMS, 0)
	if r.HTTP.RetryWaitMaxMS < r.HTTP.RetryWaitMinMS {
		bad("http.retry_wait_max_ms", "must be at least http.retry_wait_min_ms (%d), got %d",
			r.HTTP.RetryWaitMinMS, r.HTTP.RetryWaitMaxMS)
	}
	atLeast("http.pool_size", r.HTTP.PoolSize, 1)
	oneOf("http.transport", r.HTTP.Transport, TransportNetHTTP)

	oneOf("rollout.schedule", r.Rollout.Schedule, ScheduleAsync, ScheduleLockstep)
	oneOf("retriever.on_error", r.Retriever.OnError, OnErrorObserve, OnErrorFail)
	if v := r.Retriever.MaxErrorRate; !(v >= 0 && v <= 1) {
		bad("retriever.max_error_rate", "must be in [0, 1] (1: never fail a step), got %g", v)
	}
	members := func(key string, vs, allowed []string) {
		seen := map[string]bool{}
		for i, v := range vs {
			k := fmt.Sprintf("%s[%d]", key, i)
			switch {
			case !slices.Contains(allowed, v):
				bad(k, "must be one of %s, got %q", strings.Join(allowed, ", "), v)
			case seen[v]:
				bad(k, "%q is listed twice", v)
			}
			seen[v] = true
		}
	}
	members("train.filter", r.Train.Filter, AbnormalCauses)
	nonNeg("rollout.turn_penalty", r.Rollout.TurnPenalty)
	members("rollout.turn_penalty_causes", r.Rollout.TurnPenaltyCauses, PenaltyCauses)
	if r.Rollout.TurnPenalty > 0 && len(r.Rollout.TurnPenaltyCauses) == 0 {
		bad("rollout.turn_penalty_causes", "rollout.turn_penalty %g needs at least one cause (%s)", r.Rollout.TurnPenalty, strings.Join(PenaltyCauses, ", "))
	}
	if r.Tracking.WandB.Mode == "online" {
		bad("tracking.wandb.mode", "online is not supported: the run writes an offline W&B run that `wandb sync` uploads (docs/watching.md, \"Trackers\")")
	} else {
		oneOf("tracking.wandb.mode", r.Tracking.WandB.Mode, WandBOffline)
	}
	if u := r.Tracking.MLflow.TrackingURI; u == Embedded {
		bad("tracking.mlflow.tracking_uri", "must be an MLflow server's http(s) URL (`mlflow server` serves one), got %q", u)
	} else if u != "" {
		endpoint("tracking.mlflow.tracking_uri", u)
	}
	positive("tracking.flush_seconds", r.Tracking.FlushSeconds)
	atLeast("health.window", r.Health.Window, 1)
	if d := r.Health.Drop; !(d >= 0 && d <= 1) {
		bad("health.drop", "must be in [0, 1] (0: no alarm), got %g", d)
	}
	members("health.watch", r.Health.Watch, HealthWatchable)
	ag := r.Sim.Agent
	for _, kv := range []struct {
		key string
		v   float64
	}{{"sim.agent.invalid_rate", ag.InvalidRate}, {"sim.agent.repeat_rate", ag.RepeatRate}, {"sim.agent.ramble_rate", ag.RambleRate}} {
		unit(kv.key, kv.v)
	}
	if sum := ag.InvalidRate + ag.RepeatRate + ag.RambleRate; sum >= 1 {
		bad("sim.agent", "invalid_rate + repeat_rate + ramble_rate must be below 1 (the agent's normal turns need some probability), got %g", sum)
	}
	nonNeg("sim.agent.think_collapse", ag.ThinkCollapse)
	if v := ag.CutStopRate; !(v >= 0 && v <= 1) {
		bad("sim.agent.cut_stop_rate", "must be in [0, 1] (1: the agent before issue 36), got %g", v)
	}
	positive("trainer.call_timeout_seconds", r.Trainer.CallTimeoutSeconds)
	nonNeg("retriever.batch_window_ms", r.Retriever.BatchWindowMS)
	atLeast("retriever.max_batch", r.Retriever.MaxBatch, 1)
	if r.Train.MaxOffPolicySteps < 0 {
		bad("train.max_off_policy_steps", "must be at least 0, got %d", r.Train.MaxOffPolicySteps)
	}

	unit("sim.epsilon", r.Sim.Epsilon)
	gc := r.Sim.GenerationConfig
	temperature("sim.generation_config.temperature", gc.Temperature)
	if !(gc.TopP > 0 && gc.TopP <= 1) {
		bad("sim.generation_config.top_p", "must be in (0, 1], got %g", gc.TopP)
	}
	atLeast("sim.generation_config.top_k", gc.TopK, -1)
	minP("sim.generation_config.min_p", gc.MinP)
	repetition("sim.generation_config.repetition_penalty", gc.RepetitionPenalty)
	atLeast("sim.generation_config.max_new_tokens", gc.MaxNewTokens, 0)
	atLeast("sim.capacity", r.Sim.Capacity, 0)
	nonNeg("sim.decode_ms", r.Sim.DecodeMS)
	nonNeg("sim.decode_per_seq_ms", r.Sim.DecodePerSeqMS)
	nonNeg("sim.prefill_us_per_token", r.Sim.PrefillUSPerToken)
	atLeast("sim.prefill_free_tokens", r.Sim.PrefillFreeTokens, 0)
	atLeast("sim.prefill_chunk_tokens", r.Sim.PrefillChunkTokens, 0)
	nonNeg("sim.think_tokens", r.Sim.ThinkTokens)
	nonNeg("sim.think_sigma", r.Sim.ThinkSigma)
	nonNeg("sim.judge_ms", r.Sim.JudgeMS)
	nonNeg("sim.trainer_datum_ms", r.Sim.TrainerDatumMS)
	nonNeg("sim.trainer_step_ms", r.Sim.TrainerStepMS)
	nonNeg("sim.retriever_batch_ms", r.Sim.RetrieverBatchMS)
	nonNeg("sim.retriever_query_ms", r.Sim.RetrieverQueryMS)
	oneOf("sim.retriever_style", r.Sim.RetrieverStyle, RetrieverStyleDense, RetrieverStyleBM25)
	oneOf("sim.trainer.archive", r.Sim.Trainer.Archive, SimArchiveJAX, SimArchiveFSDP)
	nonNeg("sim.policy.prefill_noise", r.Sim.Policy.PrefillNoise)
	oneOf("sim.trainer.backend", r.Sim.Trainer.Backend, SimBackendJAX, SimBackendFSDP)
	// The simulated trainer refuses rank 0 on JAX, as SkyRL's JAX backend
	// does (inside the create_model future); evaluation alone (sync.kind
	// none) makes no model.
	if r.Trainer.URL == Embedded && r.Trainer.LoRARank == 0 && r.Sync.Kind != SyncNone && r.Sim.Trainer.Backend != SimBackendFSDP {
		bad("sim.trainer.backend", "%q with trainer.lora_rank 0 and trainer.url embedded: SkyRL's JAX backend trains LoRA only (\"LoRA rank 0 must be between 1 and 32\"); set sim.trainer.backend: %s to simulate full fine-tuning",
			r.Sim.Trainer.Backend, SimBackendFSDP)
	}

	for _, rf := range []struct {
		role string
		f    FaultSpec
	}{{"policy", r.Sim.Faults.Policy}, {"judge", r.Sim.Faults.Judge}, {"retriever", r.Sim.Faults.Retriever}, {"trainer", r.Sim.Faults.Trainer}} {
		f, key := rf.f, "sim.faults."+rf.role
		if !(f.Rate >= 0 && f.Rate <= 1) {
			bad(key+".rate", "must be in [0, 1], got %g", f.Rate)
		}
		for i, k := range f.Kinds {
			if !slices.Contains(faultKinds, k) {
				bad(fmt.Sprintf("%s.kinds[%d]", key, i), "must be one of %s, got %q", strings.Join(faultKinds, ", "), k)
			}
		}
		if f.Rate > 0 && len(f.Kinds) == 0 {
			bad(key+".kinds", "a fault rate needs at least one kind")
		}
		nonNeg(key+".hang_ms", f.HangMS)
		nonNeg(key+".slow_ms", f.SlowMS)
	}

	if len(r.Study.Seeds) == 0 {
		bad("study.seeds", "needs at least one seed")
	}
	for i, sd := range r.Study.Seeds {
		if slices.Index(r.Study.Seeds, sd) != i {
			bad(fmt.Sprintf("study.seeds[%d]", i), "seed %d is listed twice", sd)
		}
	}
	if _, ok := r.Variants[r.Study.Base]; r.Study.Base != StudyBase && !ok {
		bad("study.base", "%q is neither %q nor a variant of the recipe", r.Study.Base, StudyBase)
	}
	if len(r.Study.Datasets) == 0 {
		bad("study.datasets", "needs at least one dataset")
	}
	for i, d := range r.Study.Datasets {
		if d == "" {
			bad(fmt.Sprintf("study.datasets[%d]", i), "must not be empty")
		}
	}
	oneOf("study.metric", r.Study.Metric, StudyMetrics...)

	for _, name := range slices.Sorted(maps.Keys(r.Variants)) {
		key := "variants." + name
		if !nameRE.MatchString(name) {
			bad(key, "variant names use letters, digits, '_', '.' and '-' only")
		}
		if len(r.Variants[name]) == 0 {
			bad(key, "a variant needs at least one key=value override")
		}
		for i, o := range r.Variants[name] {
			if why := checkOverride(o); why != "" {
				bad(fmt.Sprintf("%s[%d]", key, i), "%s", why)
			}
		}
	}

	if len(ps) == 0 {
		return nil
	}
	return ps
}

// MissingData returns the data: paths of the recipe whose bundle is not on
// disk yet, each naming the `orchestrate data get` command that fetches
// it (a Problems), or nil. Validate does not fail on them (a recipe is
// checked on machines without the data); a command that reads the data
// must.
func (r *Recipe) MissingData() error {
	if len(r.missingData) == 0 {
		return nil
	}
	return r.missingData
}

// ValidateTraining returns nil when the recipe can train, or a Problems
// error naming sync.kind when it cannot: with sync.kind none trained
// weights never reach the policy servers, so every step would sample from
// the initial policy. Commands that train (orchestrate run, ablate, chaos,
// bench) call it after Load; orchestrate eval does not need it.
func (r *Recipe) ValidateTraining() error {
	if r.Sync.Kind != SyncNone || r.Train.Steps == 0 {
		return nil
	}
	return Problems{{
		Key: "sync.kind",
		Message: fmt.Sprintf("%q cannot train (train.steps is %d): trained weights would never reach the policy servers; set sync.kind to %s or %s, or use orchestrate eval",
			SyncNone, r.Train.Steps, SyncLoRA, SyncSGLangDisk),
	}}
}

var (
	nameRE    = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// checkURL returns why v is not "embedded" nor an http(s) URL with a host,
// or "" when it is.
func checkURL(v string) string {
	if v == Embedded {
		return ""
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" {
		// Not echoed: the value may hold credentials.
		return fmt.Sprintf("must be %q or an http(s) URL with a host", Embedded)
	}
	return ""
}

// checkFile returns why p is not a readable regular file, or "".
func checkFile(p string) string {
	st, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "no such file"
	case err != nil:
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return pe.Err.Error()
		}
		return err.Error()
	case st.IsDir():
		return "is a directory"
	}
	return ""
}

// checkOverride says what is wrong with a "key=value" override of a
// variant ("" when nothing): the key must be a recipe key, or an entry of a
// map key; variants cannot override variants.
func checkOverride(o string) string {
	key, _, ok := strings.Cut(o, "=")
	key = strings.ToLower(strings.TrimSpace(key))
	if !ok || key == "" {
		return fmt.Sprintf("%q: want key=value", o)
	}
	if key == "variants" || strings.HasPrefix(key, "variants.") {
		return fmt.Sprintf("%q: a variant cannot override variants", o)
	}
	for _, f := range schema() {
		if f.typ.Kind() == reflect.Map {
			if strings.HasPrefix(key, f.key+".") && len(key) > len(f.key)+1 {
				return ""
			}
			continue
		}
		if key == f.key {
			return ""
		}
	}
	return fmt.Sprintf("%q: unknown recipe key %q", o, key)
}

// faultKinds are the kinds of sim.faults.*.kinds (sim.FaultKinds).
var faultKinds = []string{"500", "502", "503", "429", "reset", "hang", "slow", "malformed", "lost"}
