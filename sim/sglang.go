package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy/sglang"
	"github.com/hindsearch/hindsearch/sim/internal/httpx"
	"github.com/hindsearch/hindsearch/sim/lm"
	"github.com/hindsearch/hindsearch/sim/weights"
)

// SGLang's native routes on the simulated policy, beside its vLLM ones (read
// in sgl-project/sglang; files and commits in docs/conformance.md, section
// "SGLang: native /generate (simulator)"):
//
//   - POST /generate (managers/io_struct.py GenerateReqInput,
//     sampling/sampling_params.py SamplingParams): a top-level field the
//     request type lacks is ignored (FastAPI reads the dataclass), and
//     counted in IgnoredFields; a key of sampling_params SamplingParams
//     lacks is a TypeError out of SamplingParams(**kwargs), which the route
//     does not catch: 500. Omitted sampling fields take SamplingParams'
//     defaults (max_new_tokens 128, temperature 1, top_p 1, top_k all,
//     min_p 0, penalties off, skip_special_tokens true, no_stop_trim
//     false), not the model's generation config, which only SGLang's
//     OpenAI routes read; --preferred-sampling-params is not simulated.
//     A ValueError (a check of SamplingParams.verify, no prompt, an unknown
//     adapter) is 400 {"error": {"message"}}.
//   - GET /get_model_info, GET /get_server_info (a simulated subset),
//     GET /health_generate.
//   - POST /load_lora_adapter and /unload_lora_adapter ({lora_name,
//     lora_path} / {lora_name}): 200 with {success, error_message,
//     loaded_adapters}, 400 with success false. A /generate request picks
//     an adapter by its name in lora_path.
//
// Sampling reuses the vLLM route's model and sampler: the same sampling
// settings and seed (sampling_seed here, seed there) draw the same ids.
// SGLang's own sampling differences kept here: a temperature below 1e-6 is
// greedy (vLLM: 1e-5), there is no upper bound on the temperature, top_k 0
// is refused, repetition_penalty must be in (0, 2].

// sglangSampling is SamplingParams' API part that the simulator reads; the
// other fields SamplingParams has are accepted and must keep their
// defaults (see sglangOther).
type sglangSampling struct {
	MaxNewTokens *int      `json:"max_new_tokens"`
	Stop         stopField `json:"stop"`
	// SamplingFields are the seven fields vLLM's requests carry too, under
	// the same names; SGLang defaults and checks them its own way
	// (resolve below).
	lm.SamplingFields
	SkipSpecialTokens *bool  `json:"skip_special_tokens"`
	NoStopTrim        *bool  `json:"no_stop_trim"`
	N                 *int   `json:"n"`
	SamplingSeed      *int64 `json:"sampling_seed"`
}

// sglangOther are SamplingParams' API fields the simulator does not
// implement: accepted when null or absent (SGLang's default), refused
// otherwise, as not simulated.
var sglangOther = []string{"stop_token_ids", "stop_regex", "min_new_tokens", "json_schema", "regex", "ebnf",
	"structural_tag", "ignore_eos", "spaces_between_special_tokens", "custom_params", "stream_interval", "logit_bias"}

type generateRequest struct {
	Text                 *string         `json:"text"`
	InputIDs             json.RawMessage `json:"input_ids"`
	InputEmbeds          json.RawMessage `json:"input_embeds"`
	SamplingParams       json.RawMessage `json:"sampling_params"`
	ReturnLogprob        *bool           `json:"return_logprob"`
	LogprobStartLen      *int            `json:"logprob_start_len"`
	TopLogprobsNum       *int            `json:"top_logprobs_num"`
	ReturnTextInLogprobs bool            `json:"return_text_in_logprobs"`
	Stream               bool            `json:"stream"`
	LoRAPath             *string         `json:"lora_path"`
	RID                  *string         `json:"rid"`
}

// sglangError writes SGLang's _create_error_response: 400 with the
// exception's text.
func sglangError(w http.ResponseWriter, status int, msg string) {
	httpx.WriteJSON(w, status, map[string]any{"error": map[string]any{"message": msg}})
}

// SGLangOptions are what the simulated SGLang emulates of a given server:
// its version and the server arguments that change what /generate does.
// The zero value is a current SGLang started with
// --enable-deterministic-inference, whose sampling_seed makes a draw
// reproducible, as the simulator's draws are.
type SGLangOptions struct {
	// Version is /get_server_info's "version" ("": hindsearch-simulator,
	// a current version). Below 0.5.3 SamplingParams has no sampling_seed
	// (added by upstream PR #10678, first released in 0.5.3): a request
	// carrying the key, even as null, is SamplingParams(**kwargs)'s
	// TypeError, which /generate does not catch: a plain 500.
	Version string
	// NondeterministicInference emulates a server started without
	// --enable-deterministic-inference: sampling_seed is accepted and
	// ignored (sampling/sampling_batch_info.py builds the seed tensor only
	// with the flag), so every draw is random, and /get_server_info
	// reports enable_deterministic_inference false and the sampling
	// backend flashinfer. With the flag a request without a seed draws
	// with seed 42, and the backend is pytorch (server_args.py forces it).
	NondeterministicInference bool
}

// SetSGLang sets what the simulated SGLang emulates (see SGLangOptions);
// it may be called while the server runs.
func (s *PolicyServer) SetSGLang(o SGLangOptions) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sglang = o
}

// sglangOpts returns what the simulated SGLang emulates.
func (s *PolicyServer) sglangOpts() SGLangOptions {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.sglang
}

// sglangVersion is the version /get_server_info reports.
func (s *PolicyServer) sglangVersion() string {
	if v := s.sglangOpts().Version; v != "" {
		return v
	}
	return "hindsearch-simulator"
}

// sglangHasSamplingSeed reports whether the emulated version's
// SamplingParams takes sampling_seed (0.5.3 and later; an unparsable
// version is taken as current). The version is read as the program reads
// the real server's (sglang.ParseVersion), so the two cannot disagree.
func (s *PolicyServer) sglangHasSamplingSeed() bool {
	v, ok := sglang.ParseVersion(s.sglangOpts().Version)
	return !ok || !v.Before(sglang.Version{0, 5, 3})
}

func (s *PolicyServer) sglangRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /generate", s.generate)
	mux.HandleFunc("GET /get_model_info", s.getModelInfo)
	mux.HandleFunc("GET /get_server_info", s.getServerInfo)
	mux.HandleFunc("GET /health_generate", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("POST /load_lora_adapter", s.sglangLoadLoRA)
	mux.HandleFunc("POST /unload_lora_adapter", s.sglangUnloadLoRA)
}

// parseSGLangSampling reads sampling_params: an unknown key is SGLang's
// uncaught TypeError (500), a field not simulated is refused (400).
func parseSGLangSampling(raw json.RawMessage, hasSeed bool) (sglangSampling, int, error) {
	var sp sglangSampling
	if len(raw) == 0 || string(raw) == "null" {
		return sp, 0, nil
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return sp, http.StatusBadRequest, fmt.Errorf("sampling_params: %v (a list of sampling_params is a batch, not simulated)", err)
	}
	known := map[string]bool{}
	httpx.JSONFields(reflect.TypeOf(sglangSampling{}), known)
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		switch {
		case k == "sampling_seed" && !hasSeed:
			return sp, http.StatusInternalServerError, fmt.Errorf("SamplingParams.__init__() got an unexpected keyword argument '%s'", k)
		case known[k]:
		case slices.Contains(sglangOther, k):
			if string(keys[k]) != "null" {
				return sp, http.StatusBadRequest, fmt.Errorf("sampling_params.%s is not simulated (hindsearch simulator)", k)
			}
		default:
			return sp, http.StatusInternalServerError, fmt.Errorf("Unexpected keyword argument '%s'", k)
		}
	}
	if err := json.Unmarshal(raw, &sp); err != nil {
		return sp, http.StatusBadRequest, err
	}
	return sp, 0, nil
}

// resolve applies SamplingParams' defaults and __post_init__ (a null
// takes the default; below 1e-6 greedy; top_k -1 all) and verify's checks,
// and returns the simulator's Sampling (greedy as temperature 0).
func (f sglangSampling) resolve() (lm.Sampling, error) {
	num := func(v *float64, def float64) float64 {
		if v != nil {
			return *v
		}
		return def
	}
	sp := lm.Sampling{
		Temperature:       num(f.Temperature, 1),
		TopP:              num(f.TopP, 1),
		MinP:              num(f.MinP, 0),
		RepetitionPenalty: num(f.RepetitionPenalty, 1),
		PresencePenalty:   num(f.PresencePenalty, 0),
		FrequencyPenalty:  num(f.FrequencyPenalty, 0),
		MaxTokens:         128,
		Stop:              f.Stop,
	}
	topK := -1
	if f.TopK != nil {
		topK = *f.TopK
	}
	greedy := sp.Temperature >= 0 && sp.Temperature < 1e-6
	if greedy {
		topK = 1
	}
	if f.MaxNewTokens != nil {
		sp.MaxTokens = *f.MaxNewTokens
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case !finite(sp.Temperature) || sp.Temperature < 0:
		return sp, fmt.Errorf("temperature must be a non-negative finite number, got %v.", sp.Temperature)
	case !(sp.TopP > 0 && sp.TopP <= 1):
		return sp, fmt.Errorf("top_p must be in (0, 1], got %v.", sp.TopP)
	case !(sp.MinP >= 0 && sp.MinP <= 1):
		return sp, fmt.Errorf("min_p must be in [0, 1], got %v.", sp.MinP)
	case topK != -1 && topK < 1:
		return sp, fmt.Errorf("top_k must be -1 (disable) or at least 1, got %d.", topK)
	case !(sp.FrequencyPenalty >= -2 && sp.FrequencyPenalty <= 2):
		return sp, fmt.Errorf("frequency_penalty must be in [-2, 2], got %v.", sp.FrequencyPenalty)
	case !(sp.PresencePenalty >= -2 && sp.PresencePenalty <= 2):
		return sp, fmt.Errorf("presence_penalty must be in [-2, 2], got %v.", sp.PresencePenalty)
	case !(sp.RepetitionPenalty > 0 && sp.RepetitionPenalty <= 2):
		return sp, fmt.Errorf("repetition_penalty must be in (0, 2] (1.0 = no penalty), got %v.", sp.RepetitionPenalty)
	case sp.MaxTokens < 0:
		return sp, fmt.Errorf("max_new_tokens must be at least 0, got %d.", sp.MaxTokens)
	}
	if greedy {
		sp.Temperature, sp.TopP, sp.MinP = 0, 1, 0
		return sp, nil
	}
	if topK > 0 {
		sp.TopK = topK
	}
	return sp, nil
}

// ids reads input_ids: one prompt (a batch, a list of lists, is not
// simulated).
func sglangInputIDs(raw json.RawMessage) ([]int, error) {
	if ids, ok := scanIDs(raw, nil); ok {
		return ids, nil
	}
	var ids []int
	if err := json.Unmarshal(raw, &ids); err != nil {
		return nil, fmt.Errorf("input_ids: %v (a batch of prompts is not simulated)", err)
	}
	return ids, nil
}

// logprobEntry is one [logprob, token_id, text] triple of SGLang's
// meta_info; a nil logprob is JSON null.
func logprobEntry(lp *float64, id int, text *string) []any {
	var l, t any
	if lp != nil {
		l = *lp
	}
	if text != nil {
		t = *text
	}
	return []any{l, id, t}
}

func (s *PolicyServer) generate(w http.ResponseWriter, r *http.Request) {
	s.running.Add(1)
	s.requests.Add(1)
	defer s.running.Add(-1)
	var req generateRequest
	err := s.ignored.Decode(w, r, "POST /generate", &req)
	if err != nil {
		// FastAPI's validation error.
		httpx.WriteJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": err.Error()})
		return
	}
	f, status, err := parseSGLangSampling(req.SamplingParams, s.sglangHasSamplingSeed())
	if err != nil {
		if status == http.StatusInternalServerError {
			// An exception the route does not catch: Starlette's plain 500.
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(status)
			fmt.Fprint(w, "Internal Server Error")
			return
		}
		sglangError(w, status, err.Error())
		return
	}
	tk := s.model.Tokenizer()
	hasIDs := len(req.InputIDs) > 0 && string(req.InputIDs) != "null"
	var prompt []int
	switch {
	case len(req.InputEmbeds) > 0 && string(req.InputEmbeds) != "null":
		sglangError(w, http.StatusBadRequest, "input_embeds is not simulated (hindsearch simulator)")
		return
	case hasIDs:
		// With both text and input_ids, SGLang's tokenizer manager uses
		// input_ids.
		if prompt, err = sglangInputIDs(req.InputIDs); err != nil {
			sglangError(w, http.StatusBadRequest, err.Error())
			return
		}
		if len(prompt) == 0 {
			sglangError(w, http.StatusBadRequest, "input_ids cannot be empty.")
			return
		}
	case req.Text != nil:
		prompt = tk.Encode(*req.Text)
	default:
		sglangError(w, http.StatusBadRequest, "Either text, input_ids or input_embeds should be provided.")
		return
	}
	if req.Stream {
		sglangError(w, http.StatusBadRequest, "stream is not simulated (hindsearch simulator)")
		return
	}
	if f.N != nil && *f.N != 1 {
		sglangError(w, http.StatusBadRequest, "sampling_params.n other than 1 is not simulated (hindsearch simulator)")
		return
	}
	for _, id := range prompt {
		if id < 0 || id >= tk.VocabSize() {
			sglangError(w, http.StatusBadRequest, fmt.Sprintf("The input_ids %d contains values greater than the vocab size (%d).", id, tk.VocabSize()))
			return
		}
	}
	sp, err := f.resolve()
	if err != nil {
		sglangError(w, http.StatusBadRequest, err.Error())
		return
	}
	if len(prompt) >= maxModelLen {
		sglangError(w, http.StatusBadRequest, fmt.Sprintf("The input (%d tokens) is longer than the model's context length (%d tokens).", len(prompt), maxModelLen))
		return
	}
	sp.MaxTokens = min(sp.MaxTokens, maxModelLen-len(prompt))
	sp.IncludeStopStr = f.NoStopTrim != nil && *f.NoStopTrim
	sp.KeepSpecialTokens = f.SkipSpecialTokens != nil && !*f.SkipSpecialTokens
	name := s.baseModel
	if req.LoRAPath != nil && *req.LoRAPath != "" {
		name = *req.LoRAPath
		if name == s.baseModel {
			name = "" // the base model is no adapter
		}
	}
	params, ok := s.params(name)
	switch {
	case ok:
	case name == "":
		sglangError(w, http.StatusBadRequest, fmt.Sprintf("Got LoRA adapter that has never been loaded: %s\nAll loaded adapters: %s.", *req.LoRAPath, s.loraCacheKeys()))
		return
	default:
		// SGLang's _resolve_lora_path (managers/tokenizer_manager.py): an
		// adapter loaded once and unloaded since is loaded again from its
		// path (lora_ref_cache); a name never loaded is a ValueError, 400.
		if params, err = s.reloadEvicted(name); err != nil {
			sglangError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	returnLogprob := req.ReturnLogprob != nil && *req.ReturnLogprob
	start := -1
	if req.LogprobStartLen != nil {
		start = *req.LogprobStartLen
	}
	if start >= len(prompt) {
		sglangError(w, http.StatusBadRequest, fmt.Sprintf("logprob_start_len (%d) is not less than the prompt length (%d).", start, len(prompt)))
		return
	}
	var rng *rand.Rand
	if seed := f.SamplingSeed; !s.sglangOpts().NondeterministicInference {
		if seed == nil {
			seed = &sglangDefaultSeed
		}
		rng = rand.New(rand.NewPCG(uint64(*seed), 0x9e3779b97f4a7c15))
	} else {
		rng = rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(s.requests.Load())))
	}
	var g lm.Generation
	if sp.MaxTokens > 0 {
		g = s.model.Generate(params, prompt, sp, rng)
	} else {
		g.FinishReason = "length"
	}
	var finish map[string]any
	switch {
	case g.FinishReason == "length":
		finish = map[string]any{"type": "length", "length": sp.MaxTokens}
	case g.StopReason != "":
		finish = map[string]any{"type": "stop", "matched": g.StopReason}
	default:
		finish = map[string]any{"type": "stop", "matched": g.IDs[len(g.IDs)-1]}
	}
	meta := map[string]any{
		"id": fmt.Sprintf("sim-%d", s.requests.Load()), "finish_reason": finish,
		"prompt_tokens": len(prompt), "completion_tokens": len(g.IDs), "cached_tokens": 0,
	}
	if req.RID != nil {
		meta["id"] = *req.RID
	}
	text := func(id int) *string {
		if !req.ReturnTextInLogprobs {
			return nil
		}
		t, _ := tk.DecodeText([]int{id}, false)
		return &t
	}
	scoring := returnLogprob && start >= 0
	if returnLogprob {
		// SGLang reports log_softmax(logits / temperature) by default
		// (SGLANG_RETURN_ORIGINAL_LOGPROB: the raw logits').
		lps := g.Processed
		if s.originalLogprob {
			lps = g.Logprobs
		}
		out := make([][]any, len(g.IDs))
		for i, id := range g.IDs {
			out[i] = logprobEntry(&lps[i], id, text(id))
		}
		meta["output_token_logprobs"] = out
		// -1 is the last prompt token: the scheduler's len(input_ids) - 1.
		from := start
		if from < 0 {
			from = len(prompt) - 1
		}
		in := make([][]any, 0, len(prompt)-from)
		var score []float64
		if from < len(prompt)-1 {
			score = s.prefillScore(params, prompt)
		}
		for i := from; i < len(prompt); i++ {
			if i == from {
				in = append(in, logprobEntry(nil, prompt[i], text(prompt[i])))
				continue
			}
			in = append(in, logprobEntry(&score[i], prompt[i], text(prompt[i])))
		}
		meta["input_token_logprobs"] = in
	}
	if s.eng == nil {
		s.tokens.Add(int64(len(g.IDs)))
	} else {
		prefill := s.prefill(prompt, g.IDs)
		if !s.schedule(w, r, scoring, f.SamplingSeed, prefill, len(g.IDs)) {
			return
		}
	}
	ids := g.IDs
	if ids == nil {
		ids = []int{}
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"text": g.Text, "output_ids": ids, "meta_info": meta})
}

// SetOriginalLogprob makes /generate report the raw model's logprobs, as
// SGLang does with SGLANG_RETURN_ORIGINAL_LOGPROB set; by default it
// reports the temperature-scaled ones. Call it before the server takes
// requests.
func (s *PolicyServer) SetOriginalLogprob(on bool) { s.originalLogprob = on }

// sglangDefaultSeed is the seed SGLang's deterministic sampling gives a
// request without sampling_seed.
var sglangDefaultSeed int64 = 42

// servedName is the name SGLang serves its model under: the base model
// until a disk load succeeds, then the path it loaded (SGLang's
// _update_model_path_info sets served_model_name and model_path to it).
func (s *PolicyServer) servedName() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.weightsPath != "" {
		return s.weightsPath
	}
	return s.baseModel
}

// loraCacheKeys is SGLang's lora_ref_cache.keys() as Python prints it.
func (s *PolicyServer) loraCacheKeys() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return pyDictKeys(s.loraCacheOrder)
}

func (s *PolicyServer) getModelInfo(w http.ResponseWriter, r *http.Request) {
	path := s.servedName()
	httpx.WriteJSON(w, http.StatusOK, map[string]any{
		"model_path": path, "tokenizer_path": s.baseModel, "is_generation": true,
		"preferred_sampling_params": nil, "weight_version": "default",
	})
}

func (s *PolicyServer) getServerInfo(w http.ResponseWriter, r *http.Request) {
	s.mu.RLock()
	loras := map[string]string{}
	for n, p := range s.paths {
		loras[n] = p
	}
	s.mu.RUnlock()
	// SGLang answers its server arguments at the top level
	// (dataclasses.asdict(server_args)), model_path renamed by a disk load.
	opts := s.sglangOpts()
	backend := "pytorch"
	if opts.NondeterministicInference {
		backend = "flashinfer"
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{
		"simulated": Fingerprint, "model_path": s.servedName(), "tokenizer_path": s.baseModel,
		"served_model_name": s.servedName(), "context_length": maxModelLen, "enable_lora": true, "lora_paths": loras,
		"preferred_sampling_params": nil, "enable_deterministic_inference": !opts.NondeterministicInference,
		"sampling_backend": backend, "version": s.sglangVersion(),
	})
}

func loraAnswer(w http.ResponseWriter, ok bool, msg string, loaded map[string]string) {
	status := http.StatusOK
	if !ok {
		status = http.StatusBadRequest
	}
	httpx.WriteJSON(w, status, map[string]any{"success": ok, "error_message": msg, "loaded_adapters": loaded})
}

func (s *PolicyServer) loadedPaths() map[string]string {
	out := map[string]string{}
	for n, p := range s.paths {
		out[n] = p
	}
	return out
}

func (s *PolicyServer) sglangLoadLoRA(w http.ResponseWriter, r *http.Request) {
	var req struct {
		LoRAName string `json:"lora_name"`
		LoRAPath string `json:"lora_path"`
		Pinned   bool   `json:"pinned"`
	}
	err := s.ignored.Decode(w, r, "POST /load_lora_adapter", &req)
	if err != nil {
		httpx.WriteJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": err.Error()})
		return
	}
	if req.LoRAName == "" || req.LoRAPath == "" {
		loraAnswer(w, false, "lora_name and lora_path are required (hindsearch simulator)", nil)
		return
	}
	params, err := weights.ReadAdapter(filepath.Clean(req.LoRAPath))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("no adapter found at %s", req.LoRAPath)
		}
		s.mu.RLock()
		loaded := s.loadedPaths()
		s.mu.RUnlock()
		loraAnswer(w, false, fmt.Sprintf("Failed to load LoRA adapter %s: %v", req.LoRAName, err), loaded)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.adapters[req.LoRAName]; dup {
		loraAnswer(w, false, fmt.Sprintf("Failed to load LoRA adapter %s because it is already loaded", req.LoRAName), s.loadedPaths())
		return
	}
	s.adapters[req.LoRAName] = params
	s.paths[req.LoRAName] = req.LoRAPath
	s.order = append(s.order, req.LoRAName)
	s.rememberLoRA(req.LoRAName, req.LoRAPath)
	loraAnswer(w, true, "", s.loadedPaths())
}

func (s *PolicyServer) sglangUnloadLoRA(w http.ResponseWriter, r *http.Request) {
	var req struct {
		LoRAName string `json:"lora_name"`
	}
	err := s.ignored.Decode(w, r, "POST /unload_lora_adapter", &req)
	if err != nil {
		httpx.WriteJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": err.Error()})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.paths[req.LoRAName]; !ok {
		// lora_registry.unregister's ValueError.
		loraAnswer(w, false, fmt.Sprintf("LoRA with name %s does not exist. Loaded LoRAs: %s", strings.TrimSpace(req.LoRAName), pyDictKeys(s.order)), s.loadedPaths())
		return
	}
	delete(s.adapters, req.LoRAName)
	delete(s.paths, req.LoRAName)
	if i := slices.Index(s.order, req.LoRAName); i >= 0 {
		s.order = slices.Delete(s.order, i, i+1)
	}
	loraAnswer(w, true, "", s.loadedPaths())
}

// rememberLoRA records an adapter loaded through /load_lora_adapter in
// the lora_ref_cache, which SGLang never empties (an unload keeps it).
// Called with s.mu held.
func (s *PolicyServer) rememberLoRA(name, path string) {
	if s.loraCache == nil {
		s.loraCache = map[string]string{}
	}
	if _, ok := s.loraCache[name]; !ok {
		s.loraCacheOrder = append(s.loraCacheOrder, name)
	}
	s.loraCache[name] = path
}

// reloadEvicted is SGLang's implicit reload of an adapter a /generate
// request names that is not loaded: one loaded before is read again from
// its path; a name never loaded is refused with SGLang's text.
func (s *PolicyServer) reloadEvicted(name string) (lm.Params, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.adapters[name]; ok {
		return p, nil
	}
	path, ok := s.loraCache[name]
	if !ok {
		return nil, fmt.Errorf("Got LoRA adapter that has never been loaded: %s\nAll loaded adapters: %s.", name, pyDictKeys(s.loraCacheOrder))
	}
	params, err := weights.ReadAdapter(filepath.Clean(path))
	if err != nil {
		return nil, fmt.Errorf("Failed to load LoRA adapter %s: %v", name, err)
	}
	s.adapters[name] = params
	s.paths[name] = path
	s.order = append(s.order, name)
	return params, nil
}

// pyDictKeys writes names as Python prints a dict's keys():
// dict_keys(['a', 'b']).
func pyDictKeys(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "'" + n + "'"
	}
	return "dict_keys([" + strings.Join(q, ", ") + "])"
}
