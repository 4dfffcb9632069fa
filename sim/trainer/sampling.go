package trainer

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/hindsearch/hindsearch/sim/internal/httpx"
	"github.com/hindsearch/hindsearch/sim/lm"
	"github.com/hindsearch/hindsearch/sim/weights"
)

// The Tinker sampling routes, as SkyRL serves them (skyrl/tinker/api.py
// create_sampling_session, asample, save_weights_for_sampler with
// sampling_session_seq_id, GET samplers/{id}; engine.py
// _filter_valid_requests; the backends' sample). They sample the same
// simulated model, with the same sampler and seeding, as the simulated
// vLLM's /v1/completions, so that a run through policy.server tinker
// samples what a run through vLLM samples. What depends on SkyRL's
// backend follows Backend:
//
//   - jax: a sampling session over sampler weights samples those
//     weights (jax.py load_sampler_weights loads the named checkpoint
//     into the model's adapter slot); the base model samples the base
//     weights; prompt_logprobs has prompt length - 1 entries, with no
//     leading null (tx/utils/generator.py).
//   - fsdp: every request for the model samples the weights of its last
//     save_weights_for_sampler, whatever checkpoint the session names
//     (skyrl_train_backend.py: the inference engines hold what the last
//     save broadcast); the base model cannot be sampled once requests go
//     to the backend ("Sampling requested for unknown model_id(s):
//     ['']"); prompt_logprobs has one entry per prompt token, the first
//     null (backends/utils.py convert_vllm_prompt_logprobs).
//
// SIMULATED: sampling runs beside the training worker, not in turn with
// it (SkyRL's JAX engine interleaves sample batches with training
// calls); there is no latency model and no context-length check (SkyRL
// has none either; its inference engine's own limit is not simulated).

// samplingSession is SkyRL's SamplingSessionDB row.
type samplingSession struct {
	id, session string
	seq         int
	baseModel   string
	modelPath   string
}

// maxRetrievedSamples bounds the answered sample futures kept for a
// repeated poll (SkyRL keeps every future in its database; the
// simulator would otherwise grow by one per turn for the whole run).
const maxRetrievedSamples = 4096

// samplerSnapshot is what a save for sampling hands the sampler: the
// model's weights as its archive carries them (float32, as the simulated
// vLLM reads them back), or, before any optimiser step, the base weights
// themselves (a fresh LoRA adapter or full-weight copy is the base
// model).
func samplerSnapshot(m *trainedModel) lm.Params {
	if m.t == 0 {
		return slices.Clone(m.params)
	}
	st, err := weights.EncodeSafetensors(m.params)
	if err != nil {
		return slices.Clone(m.params)
	}
	p, err := weights.DecodeSafetensors(st)
	if err != nil {
		return slices.Clone(m.params)
	}
	return p
}

// loadIntoSlot is SkyRL's JAX backend sampling sampler checkpoint ckpt of
// m (backends/jax.py load_sampler_weights, load_sampler_checkpoint; seen
// running, sim/real's TestSkyRLJAXSharesTheTrainingSlot): unless ckpt is
// the checkpoint last loaded (loaded_checkpoint_id, set only by a load),
// its weights snap are written into the adapter slot the model trains, so
// the next forward_backward and optim_step start from them; the weights
// sampled are the slot's, which after an optim_step are the trained ones
// even for the checkpoint still "loaded". Called with trainMu held; a load
// that changes the training weights is counted (SlotReloads).
func (s *Server) loadIntoSlot(m *trainedModel, ckpt string, snap lm.Params) lm.Params {
	if m.loadedSampler != ckpt {
		if !slices.Equal(samplerSnapshot(m), snap) {
			copy(m.params, snap)
			s.slotReloads.Add(1)
		}
		m.loadedSampler, m.loadedAt = ckpt, m.t
		return snap
	}
	if m.t == m.loadedAt {
		return snap
	}
	return samplerSnapshot(m)
}

// SlotReloads counts the sampler loads on the JAX backend that overwrote a
// model's training weights with other weights (loadIntoSlot).
func (s *Server) SlotReloads() int64 { return s.slotReloads.Load() }

// markerArchive is the tar SkyRL's FSDP and Megatron backends write in
// place of sampler weights for a transient save (skyrl_train_backend.py
// save_sampler_checkpoint, persist=False).
func markerArchive(modelID string) ([]byte, error) {
	msg := fmt.Sprintf("SkyRL sampler marker for %s: weights live in GPU memory (persist=False).\n", modelID)
	return weights.PackArchive(weights.ArchiveFSDP, map[string][]byte{"MARKER": []byte(msg)})
}

func (s *Server) createSamplingSession(w http.ResponseWriter, r *http.Request) {
	var req struct {
		SessionID            *string `json:"session_id"`
		SamplingSessionSeqID *int    `json:"sampling_session_seq_id"`
		BaseModel            *string `json:"base_model"`
		ModelPath            *string `json:"model_path"`
	}
	if err := s.ignored.Decode(w, r, r.Pattern, &req); err != nil {
		detail(w, http.StatusUnprocessableEntity, "%v", err)
		return
	}
	if req.SessionID == nil || req.SamplingSessionSeqID == nil {
		detail(w, http.StatusUnprocessableEntity, "Field required: session_id and sampling_session_seq_id")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sessions[*req.SessionID]; !ok {
		detail(w, http.StatusNotFound, "Session not found")
		return
	}
	if (req.BaseModel == nil) == (req.ModelPath == nil) {
		detail(w, http.StatusBadRequest, "Exactly one of base_model or model_path must be provided")
		return
	}
	ss := &samplingSession{id: s.newSamplingID(), session: *req.SessionID, seq: *req.SamplingSessionSeqID}
	if req.BaseModel != nil {
		ss.baseModel = *req.BaseModel
	} else {
		// Not checked here: asample checks the path (api.py).
		ss.modelPath = *req.ModelPath
	}
	s.samplingSessions[ss.id] = ss
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"type": "create_sampling_session", "sampling_session_id": ss.id})
}

// newSamplingID is SkyRL's f"sampling_{uuid4().hex[:8]}", counted here.
// Called with mu held.
func (s *Server) newSamplingID() string {
	s.nextID++
	return fmt.Sprintf("sampling_%08x", s.nextID)
}

// sampler implements GET samplers/{id}: the session's base model (for a
// model path, the model's) and model path.
func (s *Server) sampler(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.samplingSessions[r.PathValue("id")]
	if !ok {
		detail(w, http.StatusNotFound, "Sampler not found")
		return
	}
	base := ss.baseModel
	var path any
	if ss.modelPath != "" {
		path = ss.modelPath
		base = s.baseModel
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"sampler_id": ss.id, "base_model": base, "model_path": path})
}

// sampleRequest is SkyRL's SampleRequest (extra fields ignored, as
// pydantic does by default).
type sampleRequest struct {
	NumSamples *int `json:"num_samples"`
	Prompt     *struct {
		Chunks []json.RawMessage `json:"chunks"`
	} `json:"prompt"`
	SamplingParams *struct {
		MaxTokens   *int            `json:"max_tokens"`
		Seed        *int64          `json:"seed"`
		Stop        json.RawMessage `json:"stop"`
		Temperature *float64        `json:"temperature"`
		TopK        *int            `json:"top_k"`
		TopP        *float64        `json:"top_p"`
	} `json:"sampling_params"`
	BaseModel          *string `json:"base_model"`
	ModelPath          *string `json:"model_path"`
	SamplingSessionID  *string `json:"sampling_session_id"`
	SeqID              *int    `json:"seq_id"`
	PromptLogprobs     *bool   `json:"prompt_logprobs"`
	TopkPromptLogprobs *int    `json:"topk_prompt_logprobs"`
}

// sampleJob is a checked asample request.
type sampleJob struct {
	prompt         []int
	n              int
	sp             lm.Sampling
	seed           int64
	promptLogprobs bool
	base           string // base model sampling: its name
	modelID, ckpt  string
}

func (s *Server) asample(w http.ResponseWriter, r *http.Request) {
	var req sampleRequest
	if err := s.ignored.Decode(w, r, r.Pattern, &req); err != nil {
		detail(w, http.StatusUnprocessableEntity, "%v", err)
		return
	}
	// Pydantic's checks (422), in SampleRequest's order.
	switch {
	case req.Prompt == nil || req.SamplingParams == nil:
		detail(w, http.StatusUnprocessableEntity, "Field required: prompt and sampling_params")
		return
	case req.TopkPromptLogprobs != nil && *req.TopkPromptLogprobs < 0:
		detail(w, http.StatusUnprocessableEntity, "topk_prompt_logprobs: Input should be greater than or equal to 0")
		return
	case req.SamplingSessionID != nil && req.SeqID == nil:
		detail(w, http.StatusUnprocessableEntity, "Value error, 'seq_id' must be provided when 'sampling_session_id' is used")
		return
	case req.SamplingSessionID == nil && (req.BaseModel == nil) == (req.ModelPath == nil):
		detail(w, http.StatusUnprocessableEntity, "Value error, When 'sampling_session_id' is not provided, exactly one of 'base_model' or 'model_path' must be provided")
		return
	}
	prompt, err := promptTokens(req.Prompt.Chunks)
	if err != nil {
		detail(w, http.StatusUnprocessableEntity, "%v", err)
		return
	}
	if req.SamplingSessionID != nil && strings.Contains(*req.SamplingSessionID, ":") {
		detail(w, http.StatusBadRequest, "sampling_session_id must not contain ':' (the routing-key delimiter)")
		return
	}
	var base, path string
	if req.SamplingSessionID != nil {
		s.mu.Lock()
		ss, ok := s.samplingSessions[*req.SamplingSessionID]
		s.mu.Unlock()
		if !ok {
			detail(w, http.StatusNotFound, "Sampling session not found")
			return
		}
		base, path = ss.baseModel, ss.modelPath
	} else if req.BaseModel != nil {
		base = *req.BaseModel
	} else {
		path = *req.ModelPath
	}
	job := sampleJob{prompt: prompt, n: 1, base: base}
	if base == "" {
		id, ckpt, ok := parseSamplerPath(path)
		if !ok {
			detail(w, http.StatusBadRequest, "model_path must be tinker://model_id/checkpoint_id or tinker://model_id/sampler_weights/checkpoint_id")
			return
		}
		s.mu.Lock()
		_, ok = s.models[id]
		s.mu.Unlock()
		if !ok {
			detail(w, http.StatusNotFound, "Model not found")
			return
		}
		if st, msg := s.validateCheckpoint(id, "sampler", ckpt); st != 0 {
			detail(w, st, "%s", msg)
			return
		}
		job.modelID, job.ckpt = id, ckpt
	}
	// SamplingParams.to_types, called as the future is made.
	p := req.SamplingParams
	if p.MaxTokens == nil {
		detail(w, http.StatusBadRequest, "max_tokens is currently required")
		return
	}
	if *p.MaxTokens <= 0 {
		detail(w, http.StatusBadRequest, "max_tokens must be a positive number")
		return
	}
	job.sp = lm.Sampling{Temperature: 1, TopK: -1, TopP: 1, MaxTokens: *p.MaxTokens, IncludeStopStr: true, KeepSpecialTokens: true, IgnoreEOS: true}
	if p.Temperature != nil {
		job.sp.Temperature = *p.Temperature
	}
	if p.TopK != nil {
		job.sp.TopK = *p.TopK
	}
	if p.TopP != nil {
		job.sp.TopP = *p.TopP
	}
	if err := parseStop(p.Stop, &job.sp); err != nil {
		detail(w, http.StatusBadRequest, "%v", err)
		return
	}
	if p.Seed != nil {
		job.seed = *p.Seed
	} else {
		job.seed = rand.Int64N(1 << 31)
	}
	if req.NumSamples != nil {
		job.n = *req.NumSamples
	}
	job.promptLogprobs = (req.PromptLogprobs != nil && *req.PromptLogprobs) || (req.TopkPromptLogprobs != nil && *req.TopkPromptLogprobs > 0)
	f := &future{done: make(chan struct{}), sample: true}
	s.mu.Lock()
	rid := s.newID("sim-req")
	s.futures[rid] = f
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f.status, f.body = s.runSample(job)
		close(f.done)
	}()
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"future_id": rid, "status": "pending", "request_id": rid})
}

// promptTokens joins a ModelInput's encoded_text chunks (SkyRL infers a
// chunk's type from its keys when "type" is missing; images are not
// simulated).
func promptTokens(chunks []json.RawMessage) ([]int, error) {
	var ids []int
	for i, raw := range chunks {
		var c struct {
			Type   *string `json:"type"`
			Tokens *[]int  `json:"tokens"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("prompt.chunks[%d]: %v", i, err)
		}
		if c.Type != nil && *c.Type != "encoded_text" {
			return nil, fmt.Errorf("prompt.chunks[%d]: chunk type %q is not simulated (encoded_text only)", i, *c.Type)
		}
		if c.Tokens == nil {
			return nil, fmt.Errorf("prompt.chunks[%d].tokens: Field required", i)
		}
		ids = append(ids, *c.Tokens...)
	}
	return ids, nil
}

// parseStop is SamplingParams.to_types' stop: all integers are stop
// tokens, all strings stop strings, a mix a 400.
func parseStop(raw json.RawMessage, sp *lm.Sampling) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var ids []int
	if json.Unmarshal(raw, &ids) == nil {
		sp.StopTokens = ids
		return nil
	}
	var strs []string
	if json.Unmarshal(raw, &strs) == nil {
		sp.Stop = strs
		return nil
	}
	return fmt.Errorf("stop must be either all integers (token IDs) or all strings, not mixed")
}

// parseSamplerPath is TinkerPath.parse as asample accepts it:
// tinker://<model_id>/<checkpoint_id> or
// tinker://<model_id>/sampler_weights/<checkpoint_id>.
func parseSamplerPath(p string) (id, ckpt string, ok bool) {
	rest, ok := strings.CutPrefix(p, "tinker://")
	if !ok {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	switch {
	case len(parts) == 2:
		id, ckpt = parts[0], parts[1]
	case len(parts) == 3 && parts[1] == "sampler_weights":
		id, ckpt = parts[0], parts[2]
	default:
		return "", "", false
	}
	return id, ckpt, id != "" && ckpt != ""
}

// runSample is the engine's and backend's part of a sample: the model
// checks, then the sequences.
func (s *Server) runSample(job sampleJob) (int, any) {
	fail := func(msg string) (int, any) { return http.StatusBadRequest, map[string]any{"detail": msg} }
	// The API layer checks no token id; the inference engine refuses one
	// outside the vocabulary and the future fails (SIMULATED: the text is
	// the simulator's; the client reads no failure text).
	for _, id := range job.prompt {
		if n := s.model.Tokenizer().VocabSize(); id < 0 || id >= n {
			return fail(fmt.Sprintf("prompt token id %d is out of the vocabulary (size %d)", id, n))
		}
	}
	var params lm.Params
	if job.modelID == "" {
		if job.base != s.baseModel {
			return fail(fmt.Sprintf("Engine is configured for '%s' but request specified '%s'", s.baseModel, job.base))
		}
		if s.Backend == BackendFSDP {
			return fail("Sampling requested for unknown model_id(s): ['']")
		}
		params = lm.InitialParams()
	} else {
		s.trainMu.Lock()
		m := s.live[job.modelID]
		if m == nil {
			s.trainMu.Unlock()
			return fail(fmt.Sprintf("Model %s not loaded", job.modelID))
		}
		if s.Backend == BackendFSDP {
			params = m.synced
		} else {
			params = m.samplers[job.ckpt]
		}
		s.trainMu.Unlock()
		if params == nil {
			// Saved before this server started (the simulator keeps no
			// database): read the archive, as JAX loads it from disk.
			p, err := s.readSamplerArchive(job.modelID, job.ckpt)
			if err != nil {
				return fail(fmt.Sprintf("load sampler weights %s/%s: %v", job.modelID, job.ckpt, err))
			}
			params = p
		}
		if s.Backend != BackendFSDP {
			s.trainMu.Lock()
			if s.live[job.modelID] == m {
				params = s.loadIntoSlot(m, job.ckpt, params)
			}
			s.trainMu.Unlock()
		}
	}
	out := map[string]any{"type": "sample", "prompt_logprobs": nil, "topk_prompt_logprobs": nil}
	var seqs []map[string]any
	for i := 0; i < job.n; i++ {
		// Sample i of num_samples is seeded seed + i (engine.py); the
		// generator is the simulated vLLM's, seeded the same way.
		rng := rand.New(rand.NewPCG(uint64(job.seed+int64(i)), 0x9e3779b97f4a7c15))
		g := s.model.Generate(params, job.prompt, job.sp, rng)
		reason := "length"
		if g.FinishReason == "stop" {
			reason = "stop"
		}
		seqs = append(seqs, map[string]any{"tokens": g.IDs, "logprobs": g.Logprobs, "stop_reason": reason})
	}
	out["sequences"] = seqs
	if job.promptLogprobs {
		lps := s.model.PrefillScore(params, job.prompt, s.PrefillNoise)
		if s.Backend == BackendFSDP {
			v := make([]any, len(lps))
			for i := 1; i < len(lps); i++ {
				v[i] = lps[i]
			}
			out["prompt_logprobs"] = v
		} else {
			out["prompt_logprobs"] = lps[1:]
		}
	}
	return http.StatusOK, out
}

// readSamplerArchive reads the parameters of a sampler archive on disk.
func (s *Server) readSamplerArchive(id, ckpt string) (lm.Params, error) {
	arc := s.checkpointFile(id, "sampler", ckpt)
	for _, name := range weights.WeightFiles {
		if b, err := weights.ReadArchiveFile(arc, name); err == nil {
			return weights.DecodeSafetensors(b)
		}
	}
	return nil, fmt.Errorf("%s holds no weights", arc)
}

// noteRetrieved forgets the oldest answered sample futures beyond
// maxRetrievedSamples. Called with mu held.
func (s *Server) noteRetrieved(id string) {
	s.retrieved = append(s.retrieved, id)
	if len(s.retrieved) > maxRetrievedSamples {
		old := s.retrieved[0]
		s.retrieved = s.retrieved[1:]
		delete(s.futures, old)
	}
}

// protobufAccept is the Accept value that makes SkyRL's retrieve_future
// answer a sample result as protobuf (api.py: a substring match).
const protobufAccept = "application/x-protobuf"

// sampleProtobuf is SkyRL's _serialize_sample_output
// (proto_serialization.py) of a runSample result: tinker_public.
// SampleResponse with tokens as int32 and logprobs as float32 bytes,
// undefined prompt logprobs as NaN.
func sampleProtobuf(body any) ([]byte, bool) {
	res, ok := body.(map[string]any)
	if !ok {
		return nil, false
	}
	var b []byte
	seqs, _ := res["sequences"].([]map[string]any)
	for _, seq := range seqs {
		var m []byte
		if seq["stop_reason"] == "length" {
			m = protowire.AppendTag(m, 1, protowire.VarintType)
			m = protowire.AppendVarint(m, 1)
		}
		var toks []byte
		for _, id := range seq["tokens"].([]int) {
			toks = binary.LittleEndian.AppendUint32(toks, uint32(int32(id)))
		}
		m = protowire.AppendTag(m, 2, protowire.BytesType)
		m = protowire.AppendBytes(m, toks)
		m = protowire.AppendTag(m, 3, protowire.BytesType)
		m = protowire.AppendBytes(m, float32Bytes(seq["logprobs"].([]float64)))
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, m)
	}
	var lps []float64
	switch v := res["prompt_logprobs"].(type) {
	case []float64:
		lps = v
	case []any:
		for _, x := range v {
			f, ok := x.(float64)
			if !ok {
				f = math.NaN()
			}
			lps = append(lps, f)
		}
	}
	if lps != nil {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, float32Bytes(lps))
	}
	return b, true
}

func float32Bytes(v []float64) []byte {
	out := make([]byte, 0, 4*len(v))
	for _, f := range v {
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(float32(f)))
	}
	return out
}
