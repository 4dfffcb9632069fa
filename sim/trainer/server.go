package trainer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hindsearch/hindsearch/sim/internal/httpx"
	"github.com/hindsearch/hindsearch/sim/lm"
	"github.com/hindsearch/hindsearch/sim/weights"
)

// Server is the simulated trainer: a server of the Tinker training
// API in JSON (PROTOCOLS.md §5). It trains the simulated policy's parameter
// vector by real gradient steps (Adam) on the exact datums it is sent, using
// the same lm.Model that the simulated policy samples from, and saves sampler
// weights where SkyRL writes them,
// <checkpoints>/<model_id>/sampler_weights/<name>.tar.gz, answering SkyRL's
// path tinker://<model_id>/<name> (no sampler_weights/ segment), packed in
// the layout Archive names: an adapter archive for a LoRA model (rank > 0),
// a full-weight model export for rank 0.
//
// What SkyRL does not make idempotent, it does not either (skyrl/tinker/
// api.py): every create_model makes a new model; a save whose name the
// model already has is answered 409 "Checkpoint '<name>' already exists for
// model '<id>'" before anything else; load_weights after any other request
// on the model (create_model aside) is answered 400 "LoadWeights is not
// permitted with seq_id N". GET training_runs lists the models and GET
// training_runs/{id}/checkpoints a model's completed checkpoints, in
// SkyRL's shapes.
type Server struct {
	model     *lm.Model
	baseModel string
	ckptDir   string
	// PollWait is how long retrieve_future holds a poll before answering
	// that the result is not ready: 408 {"detail": "Timeout waiting for
	// result"} as SkyRL does (after 300 s there), or, with TryAgain, the
	// hosted service's 200 {"type": "try_again"}.
	PollWait time.Duration
	TryAgain bool
	// DatumDelay is the simulated time of forward_backward per datum and
	// StepDelay that of optim_step and of save_weights_for_sampler
	// (sim.Latency.TrainerPerDatum, sim.Latency.TrainerStep). The worker
	// spends it before computing the result, so the future is pending
	// (try_again) meanwhile. Set them before the server takes requests.
	DatumDelay, StepDelay time.Duration
	// Archive is the layout of the archives it writes, SkyRL's JAX or
	// FSDP backend's (sim.trainer.archive; "": weights.ArchiveJAX). Set it
	// before the server takes requests.
	Archive weights.ArchiveLayout
	// Backend is the SkyRL training backend it behaves like
	// (sim.trainer.backend; "": BackendJAX). Set it before the server
	// takes requests.
	Backend Backend
	// NoDeleteRoute plays a SkyRL released before its DELETE checkpoint
	// route (2026-07-16; skyrl 0.3.0 from PyPI is one, seen running): every
	// DELETE is answered as FastAPI answers a path it does not serve, 404
	// {"detail": "Not Found"}, and nothing is deleted. Set it before
	// Handler is called.
	NoDeleteRoute bool
	// SessionTimeout and CleanupInterval are SkyRL's session_timeout_sec
	// (300 s) and session_cleanup_interval_sec (60 s), tinker/config.py:
	// every CleanupInterval the models of every active session whose last
	// heartbeat is older than SessionTimeout are unloaded and the session
	// expired (engine.py cleanup_stale_sessions); an expired session still
	// takes heartbeats but is never cleaned again. Zero or negative: no
	// cleanup. Set them before Handler is called.
	SessionTimeout, CleanupInterval time.Duration
	// PrefillNoise is the standard deviation (nats) of the numerical
	// noise asample's prompt_logprobs carry (sim.policy.prefill_noise, as
	// the simulated vLLM's prompt_logprobs). Set it before the server
	// takes requests.
	PrefillNoise float64

	// slotReloads counts loadIntoSlot's overwrites of training weights.
	slotReloads atomic.Int64
	// ignored counts the request fields the server accepted and ignored,
	// as SkyRL's pydantic models do (their requests forbid no extra field).
	ignored httpx.IgnoredFields

	mu sync.Mutex
	// samplingSessions are the sampling sessions by id; retrieved the
	// answered sample futures, oldest first (see noteRetrieved).
	samplingSessions map[string]*samplingSession
	retrieved        []string
	nextID           int
	sessions         map[string]time.Time
	// expired are the sessions the stale-session cleanup ended.
	expired map[string]bool
	// cleanup starts the stale-session cleanup once (Handler).
	cleanup sync.Once
	models  map[string]*trainedModel
	order   []string // model ids in creation order, for GET training_runs
	futures map[string]*future
	work    chan job
	done    chan struct{}
	// statMu guards the worker's counters (not mu: submit sends on work
	// with mu held).
	statMu sync.Mutex
	jobs   int64         // futures completed
	datums int64         // forward_backward datums completed
	busy   time.Duration // worker time, simulated delays included
	// trainMu guards the trained models' parameters and optimiser state,
	// which only the worker changes.
	trainMu sync.Mutex
	// live are the models built and not unloaded (the worker's, under
	// trainMu).
	live map[string]*trainedModel
	wg   sync.WaitGroup
	// ckMu guards the checkpoints' status, which the worker changes (not
	// mu: submit sends on work with mu held).
	ckMu sync.Mutex
	// peak is the most the checkpoint directory held right after a save
	// (guarded by ckMu).
	peak CheckpointUsage
}

// CheckpointUsage is what the simulated trainer's checkpoint directory
// holds: the training states (<model_id>/<name>.tar.gz, save_weights), the
// sampler archives (<model_id>/sampler_weights/<name>.tar.gz) and their
// bytes, every file under the directory counted.
type CheckpointUsage struct {
	States, Samplers int
	Bytes            int64
}

// CheckpointUsage reads the checkpoint directory now.
func (s *Server) CheckpointUsage() CheckpointUsage {
	var u CheckpointUsage
	_ = filepath.WalkDir(s.ckptDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			u.Bytes += info.Size()
		}
		rel, _ := filepath.Rel(s.ckptDir, path)
		parts := strings.Split(filepath.ToSlash(rel), "/")
		switch {
		case !strings.HasSuffix(rel, ".tar.gz"):
		case len(parts) == 2:
			u.States++
		case len(parts) == 3 && parts[1] == "sampler_weights":
			u.Samplers++
		}
		return nil
	})
	return u
}

// PeakCheckpointUsage is the most states, sampler archives and bytes the
// checkpoint directory held right after any save since the server
// started (each counted at its own peak).
func (s *Server) PeakCheckpointUsage() CheckpointUsage {
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	return s.peak
}

// notePeak records the directory's usage after a save.
func (s *Server) notePeak() {
	u := s.CheckpointUsage()
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	s.peak.States = max(s.peak.States, u.States)
	s.peak.Samplers = max(s.peak.Samplers, u.Samplers)
	s.peak.Bytes = max(s.peak.Bytes, u.Bytes)
}

type trainedModel struct {
	id      string
	base    string
	created time.Time
	params  lm.Params
	m, v    []float64
	t       int
	rank    int
	lastSeq int
	seqs    map[int]seqRecord
	pending []datumGrad
	// requests counts the futures made on the model (create_model aside),
	// for load_weights' rule.
	requests int
	// ckpts are the model's checkpoints by checkpointKey (guarded by the
	// server's ckMu).
	ckpts map[string]*checkpoint
	// loaded is set once the create future built the model, and cleared
	// when it is unloaded or its session went stale (only the worker
	// changes it, under trainMu).
	loaded  bool
	session string
	// samplers are the weights each sampler checkpoint holds, by name,
	// and synced those of the last save for sampling (the worker's,
	// under trainMu).
	samplers map[string]lm.Params
	synced   lm.Params
	// loadedSampler is the sampler checkpoint last loaded into the
	// model's slot (SkyRL JAX's loaded_checkpoint_id), loadedAt the
	// optimiser step count then (loadIntoSlot).
	loadedSampler string
	loadedAt      int
}

// checkpoint is a save's record, as SkyRL's CheckpointDB row: pending
// from the POST until the worker finished it.
type checkpoint struct {
	name, kind string // kind: "training" (save_weights) or "sampler"
	status     string // "pending", "completed" or "failed"
	errMsg     string
	completed  time.Time
}

// checkpointKey is the key of a model's checkpoint of kind under name.
func checkpointKey(kind, name string) string { return kind + "/" + name }

type seqRecord struct {
	hash      string
	requestID string
}

type datumGrad struct {
	key  string
	grad []float64
}

// job is one queued unit of the worker: a simulated delay, then run.
type job struct {
	delay  time.Duration
	datums int
	run    func()
}

// Stats are the simulated trainer's worker counters.
type Stats struct {
	// Jobs counts completed futures (create_model, forward_backward,
	// optim_step, save_weights_for_sampler).
	Jobs int64
	// Datums counts the datums of completed forward_backward calls.
	Datums int64
	// BusySeconds is the worker's cumulative time on jobs, simulated
	// delays included.
	BusySeconds float64
}

// Stats returns the worker's counters.
func (s *Server) Stats() Stats {
	s.statMu.Lock()
	defer s.statMu.Unlock()
	return Stats{Jobs: s.jobs, Datums: s.datums, BusySeconds: s.busy.Seconds()}
}

type future struct {
	done   chan struct{}
	status int
	body   any
	// sample marks an asample future (forgotten a while after it was
	// answered).
	sample bool
}

// NewServer returns a simulated trainer for baseModel that writes
// checkpoints under ckptDir. Close stops its worker.
func NewServer(model *lm.Model, baseModel, ckptDir string) *Server {
	s := &Server{model: model, baseModel: baseModel, ckptDir: ckptDir, PollWait: 2 * time.Second,
		SessionTimeout: 300 * time.Second, CleanupInterval: 60 * time.Second, expired: map[string]bool{},
		sessions: map[string]time.Time{}, samplingSessions: map[string]*samplingSession{}, models: map[string]*trainedModel{}, futures: map[string]*future{}, live: map[string]*trainedModel{},
		work: make(chan job, 1024), done: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			select {
			case j := <-s.work:
				start := time.Now()
				if j.delay > 0 {
					t := time.NewTimer(j.delay)
					select {
					case <-t.C:
					case <-s.done:
						t.Stop()
						return
					}
				}
				s.trainMu.Lock()
				j.run()
				s.trainMu.Unlock()
				s.statMu.Lock()
				s.jobs++
				s.datums += int64(j.datums)
				s.busy += time.Since(start)
				s.statMu.Unlock()
			case <-s.done:
				return
			}
		}
	}()
	return s
}

// Close stops the worker goroutine.
func (s *Server) Close() {
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	s.wg.Wait()
}

// Handler returns the server's routes under /api/v1/, and starts the
// stale-session cleanup (SessionTimeout, CleanupInterval) until Close.
func (s *Server) Handler() http.Handler {
	s.cleanup.Do(func() {
		if s.SessionTimeout <= 0 || s.CleanupInterval <= 0 {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			t := time.NewTicker(s.CleanupInterval)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					s.cleanupStaleSessions(time.Now())
				case <-s.done:
					return
				}
			}
		}()
	})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/healthz", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteJSON(w, http.StatusOK, map[string]any{"status": "ok", "simulated": true})
	})
	mux.HandleFunc("GET /api/v1/get_server_capabilities", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteJSON(w, http.StatusOK, map[string]any{"supported_models": []map[string]any{{"model_name": s.baseModel}}})
	})
	mux.HandleFunc("POST /api/v1/create_session", s.createSession)
	mux.HandleFunc("POST /api/v1/session_heartbeat", s.heartbeat)
	mux.HandleFunc("POST /api/v1/create_model", s.createModel)
	mux.HandleFunc("POST /api/v1/forward_backward", s.forwardBackward)
	mux.HandleFunc("POST /api/v1/optim_step", s.optimStep)
	mux.HandleFunc("POST /api/v1/save_weights_for_sampler", s.saveWeights)
	mux.HandleFunc("POST /api/v1/save_weights", s.saveState)
	mux.HandleFunc("POST /api/v1/load_weights", s.loadState)
	mux.HandleFunc("POST /api/v1/retrieve_future", s.retrieveFuture)
	mux.HandleFunc("POST /api/v1/create_sampling_session", s.createSamplingSession)
	mux.HandleFunc("POST /api/v1/asample", s.asample)
	mux.HandleFunc("GET /api/v1/samplers/{id}", s.sampler)
	mux.HandleFunc("GET /api/v1/training_runs", s.trainingRuns)
	mux.HandleFunc("GET /api/v1/training_runs/{id}/checkpoints", s.listCheckpoints)
	mux.HandleFunc("POST /api/v1/unload_model", s.unloadModel)
	if !s.NoDeleteRoute {
		mux.HandleFunc("DELETE /api/v1/training_runs/{id}/checkpoints/{path...}", s.deleteCheckpoint)
	}
	mux.HandleFunc("GET /api/v1/training_runs/{id}/checkpoints/{name}/archive", s.checkpointArchive)
	mux.HandleFunc("GET /api/v1/training_runs/{id}/checkpoints/{name}/download", s.checkpointDownload)
	mux.HandleFunc("POST /api/v1/weights_info", s.weightsInfo)
	// Routes the Tinker SDK calls besides the training ones (seen running
	// against skyrl 0.3.0 with tinker 0.24.1: sim/real's SDK test).
	mux.HandleFunc("POST /api/v1/client/config", func(w http.ResponseWriter, _ *http.Request) {
		httpx.WriteJSON(w, http.StatusOK, map[string]any{"pjwt_auth_enabled": false})
	})
	mux.HandleFunc("POST /api/v1/telemetry", func(w http.ResponseWriter, _ *http.Request) {
		httpx.WriteJSON(w, http.StatusOK, map[string]any{"status": "accepted"})
	})
	mux.HandleFunc("POST /api/v1/get_info", s.getInfo)
	mux.HandleFunc("GET /api/v1/training_runs/{id}", s.trainingRun)
	mux.HandleFunc("GET /api/v1/models/{id}/checkpoints", s.listCheckpoints)
	mux.HandleFunc("POST /api/v1/forward", s.forward)
	return httpx.Labelled(fastAPIErrors(mux))
}

// IgnoredFields returns "ROUTE FIELD" -> requests that carried a top-level
// field the server ignored (named in each answer's
// httpx.IgnoredFieldsHeader too).
func (s *Server) IgnoredFields() map[string]int { return s.ignored.Snapshot() }

// fastAPIErrors answers a request no route of mux takes as FastAPI does:
// 405 {"detail": "Method Not Allowed"} when the path has a route for
// another method, else 404 {"detail": "Not Found"}: what a client meets on
// a SkyRL without a route (DELETE before 2026-07-16, NoDeleteRoute).
func fastAPIErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
			if m == r.Method {
				continue
			}
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != "" {
				detail(w, http.StatusMethodNotAllowed, "Method Not Allowed")
				return
			}
		}
		detail(w, http.StatusNotFound, "Not Found")
	})
}

func detail(w http.ResponseWriter, status int, format string, args ...any) {
	httpx.WriteJSON(w, status, map[string]any{"detail": fmt.Sprintf(format, args...)})
}

func (s *Server) newID(prefix string) string {
	s.nextID++
	return fmt.Sprintf("%s-%06d", prefix, s.nextID)
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Tags         *[]string      `json:"tags"`
		UserMetadata map[string]any `json:"user_metadata"`
		SDKVersion   *string        `json:"sdk_version"`
		Type         string         `json:"type"`
	}
	if err := s.ignored.Decode(w, r, r.Pattern, &req); err != nil {
		detail(w, http.StatusUnprocessableEntity, "%v", err)
		return
	}
	// SkyRL's CreateSessionRequest requires tags and sdk_version.
	if req.Tags == nil || req.SDKVersion == nil {
		detail(w, http.StatusUnprocessableEntity, "Field required: tags and sdk_version")
		return
	}
	s.mu.Lock()
	id := s.newID("sim-session")
	s.sessions[id] = time.Now()
	s.mu.Unlock()
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"session_id": id, "type": "create_session", "info_message": "hindsearch simulator: simulated trainer"})
}

func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request) {
	var req struct {
		SessionID string `json:"session_id"`
		Type      string `json:"type"`
	}
	if err := s.ignored.Decode(w, r, r.Pattern, &req); err != nil {
		detail(w, http.StatusUnprocessableEntity, "%v", err)
		return
	}
	s.mu.Lock()
	_, ok := s.sessions[req.SessionID]
	if ok {
		s.sessions[req.SessionID] = time.Now()
	}
	s.mu.Unlock()
	if !ok {
		detail(w, http.StatusNotFound, "Session not found")
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"type": "session_heartbeat"})
}

// submit registers a future and queues fn on the worker, after delay of
// simulated work on datums datums.
func (s *Server) submit(delay time.Duration, datums int, fn func() (int, any)) string {
	f := &future{done: make(chan struct{})}
	id := s.newID("sim-req")
	s.futures[id] = f
	s.work <- job{delay: delay, datums: datums, run: func() {
		f.status, f.body = fn()
		close(f.done)
	}}
	return id
}

func (s *Server) createModel(w http.ResponseWriter, r *http.Request) {
	var req struct {
		SessionID  string `json:"session_id"`
		ModelSeqID int    `json:"model_seq_id"`
		BaseModel  string `json:"base_model"`
		LoRAConfig struct {
			Rank int `json:"rank"`
			// Seed seeds SkyRL's LoRA initialisation (random when
			// omitted). SIMULATED: the simulator's models all start
			// from the base parameters, so it changes nothing here.
			Seed *int64 `json:"seed"`
		} `json:"lora_config"`
		Type string `json:"type"`
	}
	if err := s.ignored.Decode(w, r, r.Pattern, &req); err != nil {
		detail(w, http.StatusUnprocessableEntity, "%v", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sessions[req.SessionID]; !ok {
		detail(w, http.StatusNotFound, "Session not found")
		return
	}
	if req.BaseModel != s.baseModel {
		detail(w, http.StatusBadRequest, "base model %q is not supported (the simulator serves %q)", req.BaseModel, s.baseModel)
		return
	}
	// Rank 0 is full fine-tuning (SkyRL's FSDP backend), any other rank a
	// LoRA adapter; SkyRL checks no range, the simulator refuses a
	// negative rank.
	if req.LoRAConfig.Rank < 0 {
		detail(w, http.StatusBadRequest, "lora_config.rank must be at least 0 (0: full weights)")
		return
	}
	// A new model for every call, as SkyRL (api.py create_model mints a
	// model id per request; nothing de-duplicates it).
	mid := s.newID("sim-model")
	tm := &trainedModel{id: mid, base: req.BaseModel, created: time.Now().UTC(), params: lm.InitialParams(),
		m: make([]float64, lm.NumParams), v: make([]float64, lm.NumParams), rank: req.LoRAConfig.Rank,
		seqs: map[int]seqRecord{}, ckpts: map[string]*checkpoint{}, session: req.SessionID}
	s.models[mid] = tm
	s.order = append(s.order, mid)
	lora := map[string]any{"rank": req.LoRAConfig.Rank, "alpha": 32.0}
	// As SkyRL, the model's row exists from the POST on (it is listed);
	// the backend builds it in the future, in order with the other
	// futures, and a refusal fails the future, not the POST.
	rid := s.submit(0, 0, func() (int, any) {
		if why := s.admitModel(tm); why != "" {
			return http.StatusBadRequest, map[string]any{"detail": why}
		}
		tm.loaded = true
		s.live[tm.id] = tm
		return http.StatusOK, map[string]any{"model_id": mid, "base_model": req.BaseModel, "lora_config": lora}
	})
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"model_id": mid, "base_model": req.BaseModel,
		"lora_config": map[string]any{"rank": req.LoRAConfig.Rank}, "status": "created", "request_id": rid})
}

// maxLoRA are SkyRL's JAX backend defaults (skyrl/backends/jax.py
// max_lora_adapters, max_lora_rank).
const maxLoRAAdapters, maxLoRARank = 32, 32

// admitModel is the backend's create_model (run by the worker): the
// refusal's text, or "" when the model can be built. FSDP
// (skyrl_train_backend.py create_model) holds one policy model at a time:
// once one exists a full-weight model is refused, a LoRA model after a
// full-weight one too, and a second LoRA model fails in the FSDP worker's
// adapter store. JAX (jax.py create_model) takes up to 31 LoRA models and
// refuses rank 0 and ranks above 32.
func (s *Server) admitModel(m *trainedModel) string {
	live := slices.SortedFunc(maps.Values(s.live), func(a, b *trainedModel) int { return strings.Compare(a.id, b.id) })
	if s.Backend == BackendFSDP {
		switch {
		case len(live) == 0:
			return ""
		case m.rank == 0:
			return "SkyRLTrainBackend already has a 'policy' model; multi-tenant training is only supported for LoRA (rank > 0)"
		case live[0].rank == 0:
			return "Cannot register an additional LoRA adapter: the first policy model was created without LoRA. Recreate the server with a LoRA-enabled first model."
		default:
			return "FSDPPolicyWorkerBase.register_adapter is not implemented: multi-tenant LoRA adapter management (the adapter store) is currently only supported on the Megatron backend. The FSDP backend supports a single LoRA adapter (or full fine-tuning) per worker group."
		}
	}
	if len(live) >= maxLoRAAdapters-1 {
		return fmt.Sprintf("Maximum number of LoRA adapters (%d) reached", maxLoRAAdapters)
	}
	if !(0 < m.rank && m.rank <= maxLoRARank) {
		return fmt.Sprintf("LoRA rank %d must be between 1 and %d", m.rank, maxLoRARank)
	}
	return ""
}

// unloadModel implements POST unload_model {model_id}: 404 "Model not
// found" for a model never created; otherwise a future that frees the
// model (its checkpoints stay) and answers {model_id, status: "unloaded"},
// also for a model no longer loaded (SkyRL's engine logs a warning and
// answers the same).
func (s *Server) unloadModel(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ModelID string `json:"model_id"`
		Type    string `json:"type"`
	}
	if err := s.ignored.Decode(w, r, r.Pattern, &req); err != nil {
		detail(w, http.StatusUnprocessableEntity, "%v", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.models[req.ModelID]
	if !ok {
		detail(w, http.StatusNotFound, "Model not found")
		return
	}
	rid := s.submit(0, 0, s.unloadJob(m))
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"request_id": rid, "model_id": m.id})
}

// getInfo implements POST get_info {model_id}: the model's base model,
// LoRA rank and status as SkyRL answers them (404 "Model not found" for
// an unknown id); the SDK asks when it makes a training client.
func (s *Server) getInfo(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ModelID string  `json:"model_id"`
		Type    *string `json:"type"`
	}
	if err := s.ignored.Decode(w, r, r.Pattern, &req); err != nil {
		detail(w, http.StatusUnprocessableEntity, "%v", err)
		return
	}
	s.mu.Lock()
	m, ok := s.models[req.ModelID]
	s.mu.Unlock()
	if !ok {
		detail(w, http.StatusNotFound, "Model not found")
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"model_id": m.id, "status": "created",
		"model_data": map[string]any{"base_model": m.base, "lora_config": map[string]any{"rank": m.rank}, "model_name": m.base}})
}

// trainingRun implements GET training_runs/{id}: one entry of the
// training_runs listing (404 "Model not found" for an unknown id).
func (s *Server) trainingRun(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	m, ok := s.models[r.PathValue("id")]
	s.mu.Unlock()
	if !ok {
		detail(w, http.StatusNotFound, "Model not found")
		return
	}
	httpx.WriteJSON(w, http.StatusOK, trainingRunEntry(m))
}

// trainingRunEntry is m as SkyRL's TrainingRun model answers it.
func trainingRunEntry(m *trainedModel) map[string]any {
	return map[string]any{"training_run_id": m.id, "base_model": m.base, "model_owner": "default",
		"is_lora": true, "corrupted": false, "lora_rank": m.rank, "last_request_time": m.created.Format(time.RFC3339Nano),
		"last_checkpoint": nil, "last_sampler_checkpoint": nil, "user_metadata": nil}
}

// unloadJob is the worker's part of unloading m (unload_model, the
// stale-session cleanup): the model is freed, its checkpoints stay, and
// the answer is SkyRL's, also for a model no longer loaded.
func (s *Server) unloadJob(m *trainedModel) func() (int, any) {
	return func() (int, any) {
		m.loaded = false
		m.pending = nil
		delete(s.live, m.id)
		return http.StatusOK, map[string]any{"model_id": m.id, "status": "unloaded", "type": "unload_model"}
	}
}

// cleanupStaleSessions unloads the models of the active sessions silent
// since before now-SessionTimeout and expires those sessions, as SkyRL's
// engine does between batches; it returns how many models it asked to
// unload.
func (s *Server) cleanupStaleSessions(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	cutoff := now.Add(-s.SessionTimeout)
	stale := map[string]bool{}
	for id, last := range s.sessions {
		if !s.expired[id] && last.Before(cutoff) {
			stale[id] = true
		}
	}
	n := 0
	for _, id := range s.order {
		m := s.models[id]
		if m == nil || !stale[m.session] {
			continue
		}
		n++
		s.submit(0, 0, s.unloadJob(m))
	}
	for id := range stale {
		s.expired[id] = true
	}
	return n
}

// ModelLoaded reports whether modelID is built and not unloaded.
func (s *Server) ModelLoaded(modelID string) bool {
	s.mu.Lock()
	m := s.models[modelID]
	s.mu.Unlock()
	if m == nil {
		return false
	}
	s.trainMu.Lock()
	defer s.trainMu.Unlock()
	return m.loaded
}

// checkpointFile is where a checkpoint of kind ("training" or "sampler")
// lies.
func (s *Server) checkpointFile(id, kind, name string) string {
	if kind == "sampler" {
		return filepath.Join(s.ckptDir, id, "sampler_weights", name+".tar.gz")
	}
	return filepath.Join(s.ckptDir, id, name+".tar.gz")
}

// lookupCheckpoint is SkyRL's checkpoint row of (id, kind, name): the
// record, or for a model this server has no record of (one made before a
// restart: the simulator keeps no database, SkyRL's survives) a completed
// row when its file exists; nil when there is none.
func (s *Server) lookupCheckpoint(id, kind, name string) (*trainedModel, *checkpoint) {
	s.mu.Lock()
	m := s.models[id]
	s.mu.Unlock()
	if m != nil {
		s.ckMu.Lock()
		defer s.ckMu.Unlock()
		return m, m.ckpts[checkpointKey(kind, name)]
	}
	if _, err := os.Stat(s.checkpointFile(id, kind, name)); err == nil {
		return nil, &checkpoint{name: name, kind: kind, status: "completed"}
	}
	return nil, nil
}

// validateCheckpoint is SkyRL's validate_checkpoint (api.py): 404 no
// row, 425 pending, 500 failed, 0 completed.
func (s *Server) validateCheckpoint(id, kind, name string) (int, string) {
	_, ck := s.lookupCheckpoint(id, kind, name)
	if ck == nil {
		return http.StatusNotFound, fmt.Sprintf("Checkpoint not found: %s/%s", id, name)
	}
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	switch ck.status {
	case "pending":
		return http.StatusTooEarly, "Checkpoint is still being created"
	case "failed":
		return http.StatusInternalServerError, "Checkpoint creation failed: " + ck.errMsg
	}
	return 0, ""
}

// deleteCheckpoint implements DELETE training_runs/{id}/checkpoints/
// {weights|sampler_weights}/{name} as SkyRL's delete_checkpoint: the kind
// from the path's prefix or ?checkpoint_type=training|sampler (a bare name
// without it, or another prefix, is a 400), 422 for a bad id or name, 404
// "Checkpoint not found: <id>/<name>", 425 while it is pending; otherwise
// the row goes, then the file, and the answer is 204. A failed checkpoint
// can be deleted.
func (s *Server) deleteCheckpoint(w http.ResponseWriter, r *http.Request) {
	id, path := r.PathValue("id"), r.PathValue("path")
	if !reName.MatchString(id) || len(id) > 255 {
		detail(w, http.StatusUnprocessableEntity, "unique_id %q must match ^[a-zA-Z0-9_-]+$", id)
		return
	}
	kind := r.URL.Query().Get("checkpoint_type")
	if kind != "" && kind != "training" && kind != "sampler" {
		detail(w, http.StatusUnprocessableEntity, "checkpoint_type: Input should be 'training' or 'sampler'")
		return
	}
	name := path
	if prefix, rest, ok := strings.Cut(path, "/"); ok {
		inferred := map[string]string{"weights": "training", "sampler_weights": "sampler"}[prefix]
		if inferred == "" {
			detail(w, http.StatusBadRequest, "Invalid checkpoint path: %s", path)
			return
		}
		if kind != "" && kind != inferred {
			detail(w, http.StatusBadRequest, "checkpoint_type does not match checkpoint path")
			return
		}
		kind, name = inferred, rest
	}
	if !reName.MatchString(name) || len(name) > 255 {
		detail(w, http.StatusUnprocessableEntity, "Invalid checkpoint_id")
		return
	}
	if kind == "" {
		detail(w, http.StatusBadRequest, "Invalid checkpoint identifier. Expected format 'weights/<name>' (training weights) or 'sampler_weights/<name>' (sampler weights), where <name> is a single path segment.")
		return
	}
	m, ck := s.lookupCheckpoint(id, kind, name)
	if ck == nil {
		detail(w, http.StatusNotFound, "Checkpoint not found: %s/%s", id, name)
		return
	}
	s.ckMu.Lock()
	if ck.status == "pending" {
		s.ckMu.Unlock()
		detail(w, http.StatusTooEarly, "Checkpoint is still being created")
		return
	}
	if m != nil {
		delete(m.ckpts, checkpointKey(kind, name))
	}
	s.ckMu.Unlock()
	if m != nil && kind == "sampler" {
		s.trainMu.Lock()
		delete(m.samplers, name)
		s.trainMu.Unlock()
	}
	if err := os.Remove(s.checkpointFile(id, kind, name)); err != nil && !os.IsNotExist(err) {
		// SkyRL commits the row's deletion first: an orphaned file is
		// left, not a row without its file.
		detail(w, http.StatusInternalServerError, "%v", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// checkpointArchive implements GET training_runs/{id}/checkpoints/{name}/
// archive for sampler weights: validate_checkpoint's 404/425/500, else a
// 302 to the download route.
func (s *Server) checkpointArchive(w http.ResponseWriter, r *http.Request) {
	id, name := r.PathValue("id"), r.PathValue("name")
	if !reName.MatchString(id) || !reName.MatchString(name) {
		detail(w, http.StatusUnprocessableEntity, "unique_id and checkpoint_id must match ^[a-zA-Z0-9_-]+$")
		return
	}
	if st, msg := s.validateCheckpoint(id, "sampler", name); st != 0 {
		detail(w, st, "%s", msg)
		return
	}
	w.Header().Set("Expires", time.Now().UTC().Add(2*time.Hour).Format(http.TimeFormat))
	http.Redirect(w, r, "/api/v1/training_runs/"+id+"/checkpoints/"+name+"/download", http.StatusFound)
}

// checkpointDownload implements the download route: the archive's bytes.
func (s *Server) checkpointDownload(w http.ResponseWriter, r *http.Request) {
	id, name := r.PathValue("id"), r.PathValue("name")
	if !reName.MatchString(id) || !reName.MatchString(name) {
		detail(w, http.StatusUnprocessableEntity, "unique_id and checkpoint_id must match ^[a-zA-Z0-9_-]+$")
		return
	}
	if st, msg := s.validateCheckpoint(id, "sampler", name); st != 0 {
		detail(w, st, "%s", msg)
		return
	}
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s_%s.tar.gz"`, id, name))
	http.ServeFile(w, r, s.checkpointFile(id, "sampler", name))
}

// weightsInfo implements POST weights_info {tinker_path}: for
// tinker://<id>/weights/<name>, the model (404 "Model not found") and
// validate_checkpoint's 404/425/500, else the model's base and rank.
func (s *Server) weightsInfo(w http.ResponseWriter, r *http.Request) {
	var req struct {
		TinkerPath string `json:"tinker_path"`
	}
	if err := s.ignored.Decode(w, r, r.Pattern, &req); err != nil {
		detail(w, http.StatusUnprocessableEntity, "%v", err)
		return
	}
	rest, ok := strings.CutPrefix(req.TinkerPath, "tinker://")
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 3 || parts[1] != "weights" {
		detail(w, http.StatusBadRequest, "Invalid tinker path format. Expected: tinker://model_id/weights/checkpoint_id")
		return
	}
	s.mu.Lock()
	m := s.models[parts[0]]
	s.mu.Unlock()
	if m == nil {
		detail(w, http.StatusNotFound, "Model not found")
		return
	}
	if st, msg := s.validateCheckpoint(parts[0], "training", parts[2]); st != 0 {
		detail(w, st, "%s", msg)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"base_model": m.base, "is_lora": m.rank > 0, "lora_rank": m.rank})
}

// trainingRuns implements GET training_runs?limit&offset: the models in
// creation order, SkyRL's TrainingRunsResponse. As SkyRL, limit defaults to
// 20 and offset to 0, every run says is_lora true (even rank 0), and a page
// past the end has total_count 0.
func (s *Server) trainingRuns(w http.ResponseWriter, r *http.Request) {
	limit, offset := 20, 0
	for _, q := range []struct {
		name string
		v    *int
	}{{"limit", &limit}, {"offset", &offset}} {
		if raw := r.URL.Query().Get(q.name); raw != "" {
			n, err := strconv.Atoi(raw)
			if err != nil {
				detail(w, http.StatusUnprocessableEntity, "query %s: %q is not an integer", q.name, raw)
				return
			}
			*q.v = n
		}
	}
	s.mu.Lock()
	var runs []map[string]any
	for i := max(offset, 0); i < len(s.order) && len(runs) < max(limit, 0); i++ {
		m := s.models[s.order[i]]
		runs = append(runs, trainingRunEntry(m))
	}
	total := len(s.order)
	s.mu.Unlock()
	if len(runs) == 0 {
		total = 0
		runs = []map[string]any{}
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"training_runs": runs,
		"cursor": map[string]any{"offset": offset, "limit": limit, "total_count": total}})
}

// listCheckpoints implements GET training_runs/{id}/checkpoints: the
// model's completed checkpoints (none for an unknown model), with SkyRL's
// tinker_path tinker://<id>/{weights|sampler_weights}/<name>.
func (s *Server) listCheckpoints(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !reName.MatchString(id) || len(id) > 255 {
		detail(w, http.StatusUnprocessableEntity, "unique_id %q must match ^[a-zA-Z0-9_-]+$", id)
		return
	}
	s.mu.Lock()
	m := s.models[id]
	s.mu.Unlock()
	out := []map[string]any{}
	if m != nil {
		s.ckMu.Lock()
		var cks []*checkpoint
		for _, ck := range m.ckpts {
			if ck.status == "completed" {
				cks = append(cks, ck)
			}
		}
		s.ckMu.Unlock()
		sort.Slice(cks, func(i, j int) bool { return cks[i].completed.Before(cks[j].completed) })
		for _, ck := range cks {
			kind := "weights"
			if ck.kind == "sampler" {
				kind = "sampler_weights"
			}
			out = append(out, map[string]any{"checkpoint_id": ck.name, "checkpoint_type": ck.kind,
				"time": ck.completed.Format(time.RFC3339Nano), "tinker_path": "tinker://" + id + "/" + kind + "/" + ck.name})
		}
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"checkpoints": out})
}

// sequenced checks a call's seq_id: the next one is accepted, a repeat with
// the same body returns the original future, anything else is refused.
// admit, when set, runs first (under the server's lock, the model known):
// a status other than 0 is answered with its detail and nothing else
// happens; otherwise the undo it returns (when not nil) runs if the call is
// refused afterwards, as SkyRL rolls back what a refused request recorded.
func (s *Server) sequenced(w http.ResponseWriter, modelID string, seq int, body any, delay time.Duration, datums int,
	admit func(m *trainedModel) (int, string, func()), fn func(m *trainedModel) (int, any)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.models[modelID]
	if !ok {
		detail(w, http.StatusNotFound, "Model not found")
		return
	}
	accepted := false
	if admit != nil {
		st, msg, undo := admit(m)
		if st != 0 {
			detail(w, st, "%s", msg)
			return
		}
		if undo != nil {
			defer func() {
				if !accepted {
					undo()
				}
			}()
		}
	}
	raw, _ := json.Marshal(body)
	sum := sha256.Sum256(raw)
	hash := hex.EncodeToString(sum[:])
	if rec, seen := m.seqs[seq]; seen {
		if rec.hash != hash {
			// SkyRL's words (api.py create_future).
			detail(w, http.StatusConflict, "Training request sequence number was reused")
			return
		}
		httpx.WriteJSON(w, http.StatusOK, map[string]any{"request_id": rec.requestID, "model_id": modelID})
		return
	}
	if seq != m.lastSeq+1 {
		detail(w, http.StatusBadRequest, "seq_id %d out of order: expected %d", seq, m.lastSeq+1)
		return
	}
	m.lastSeq = seq
	m.requests++
	accepted = true
	rid := s.submit(delay, datums, func() (int, any) {
		if !m.loaded {
			// SkyRL's engine (_filter_valid_requests) fails a request on
			// a model its backend does not hold.
			return http.StatusBadRequest, map[string]any{"detail": fmt.Sprintf("Model %s not loaded", m.id)}
		}
		return fn(m)
	})
	m.seqs[seq] = seqRecord{hash: hash, requestID: rid}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"request_id": rid, "model_id": modelID})
}

type wireTensor struct {
	Data  []float64 `json:"data"`
	Dtype string    `json:"dtype"`
	Shape []int     `json:"shape"`
}

type wireDatum struct {
	ModelInput struct {
		Chunks []struct {
			Type   string `json:"type"`
			Tokens []int  `json:"tokens"`
		} `json:"chunks"`
	} `json:"model_input"`
	LossFnInputs map[string]wireTensor `json:"loss_fn_inputs"`
}

type fbRequest struct {
	ModelID              string  `json:"model_id"`
	SeqID                int     `json:"seq_id"`
	ForwardBackwardInput fbInput `json:"forward_backward_input"`
	Type                 string  `json:"type"`
}

// fbInput is the forward_backward_input (and forward_input) of a request.
type fbInput struct {
	Data         []wireDatum        `json:"data"`
	LossFn       string             `json:"loss_fn"`
	LossFnConfig map[string]float64 `json:"loss_fn_config"`
}

func (s *Server) forwardBackward(w http.ResponseWriter, r *http.Request) {
	var req fbRequest
	if err := s.ignored.Decode(w, r, r.Pattern, &req); err != nil {
		detail(w, http.StatusUnprocessableEntity, "%v", err)
		return
	}
	s.modelPass(w, req.ModelID, req.SeqID, req, req.ForwardBackwardInput, true)
}

// forward implements POST forward: forward_backward's datums and loss,
// answered the same way, with no gradient kept (SkyRL's forward request
// carries forward_input).
func (s *Server) forward(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ModelID      string  `json:"model_id"`
		SeqID        int     `json:"seq_id"`
		ForwardInput fbInput `json:"forward_input"`
		Type         string  `json:"type"`
	}
	if err := s.ignored.Decode(w, r, r.Pattern, &req); err != nil {
		detail(w, http.StatusUnprocessableEntity, "%v", err)
		return
	}
	s.modelPass(w, req.ModelID, req.SeqID, req, req.ForwardInput, false)
}

// modelPass checks and runs the input of a forward_backward (accumulate)
// or forward request (body, for the request's replay check) on modelID at
// seqID, as SkyRL does.
func (s *Server) modelPass(w http.ResponseWriter, modelID string, seqID int, body any, in fbInput, accumulate bool) {
	switch in.LossFn {
	case "importance_sampling", "ppo", "cross_entropy":
	default:
		detail(w, http.StatusBadRequest, "loss_fn %q is not supported by the simulator (importance_sampling, ppo, cross_entropy)", in.LossFn)
		return
	}
	// SkyRL's ForwardBackwardInput validator: each loss takes only its own
	// loss_fn_config keys (none for importance_sampling and cross_entropy),
	// a 422 otherwise.
	allowed := map[string][]string{"ppo": {"clip_high_threshold", "clip_low_threshold", "value_clip"}}[in.LossFn]
	var invalid []string
	for k := range in.LossFnConfig {
		if !slices.Contains(allowed, k) {
			invalid = append(invalid, k)
		}
	}
	if len(invalid) > 0 {
		sort.Strings(invalid)
		if len(allowed) == 0 {
			detail(w, http.StatusUnprocessableEntity, "Value error, loss_fn='%s' does not accept loss_fn_config keys. Received: %q.", in.LossFn, invalid)
		} else {
			detail(w, http.StatusUnprocessableEntity, "Value error, Invalid loss_fn_config keys for loss_fn='%s': %q. Allowed keys: %q.", in.LossFn, invalid, allowed)
		}
		return
	}
	for i, d := range in.Data {
		if err := checkDatum(d, in.LossFn); err != nil {
			detail(w, http.StatusBadRequest, "datum %d: %v", i, err)
			return
		}
	}
	s.sequenced(w, modelID, seqID, body, s.DatumDelay*time.Duration(len(in.Data)), len(in.Data), nil, func(m *trainedModel) (int, any) {
		return s.runForwardBackward(m, in.Data, in.LossFn, in.LossFnConfig, accumulate)
	})
}

func checkDatum(d wireDatum, lossFn string) error {
	if len(d.ModelInput.Chunks) == 0 {
		return fmt.Errorf("model_input has no chunks")
	}
	n := 0
	for _, c := range d.ModelInput.Chunks {
		if c.Type != "encoded_text" {
			return fmt.Errorf("chunk type %q is not encoded_text", c.Type)
		}
		n += len(c.Tokens)
	}
	need := []string{"target_tokens", "weights"}
	if lossFn != "cross_entropy" {
		need = append(need, "logprobs", "advantages")
	}
	for _, k := range need {
		t, ok := d.LossFnInputs[k]
		if !ok {
			return fmt.Errorf("loss_fn_inputs.%s missing", k)
		}
		if len(t.Data) != n || len(t.Shape) != 1 || t.Shape[0] != n {
			return fmt.Errorf("loss_fn_inputs.%s has %d values and shape %v, model input has %d tokens", k, len(t.Data), t.Shape, n)
		}
		want := "float32"
		if k == "target_tokens" {
			want = "int64"
		}
		if t.Dtype != want {
			return fmt.Errorf("loss_fn_inputs.%s dtype %q, want %q", k, t.Dtype, want)
		}
	}
	for k := range d.LossFnInputs {
		switch k {
		case "target_tokens", "weights", "logprobs", "advantages":
		default:
			return fmt.Errorf("unknown loss_fn_inputs field %q", k)
		}
	}
	return nil
}

func (s *Server) runForwardBackward(m *trainedModel, data []wireDatum, lossFn string, cfg map[string]float64, accumulate bool) (int, any) {
	clipLow, clipHigh := 0.8, 1.2
	if v, ok := cfg["clip_low_threshold"]; ok {
		clipLow = v
	}
	if v, ok := cfg["clip_high_threshold"]; ok {
		clipHigh = v
	}
	var outputs []map[string]any
	lossSum, clipped, tokens := 0.0, 0, 0
	for _, d := range data {
		var toks []int
		for _, c := range d.ModelInput.Chunks {
			toks = append(toks, c.Tokens...)
		}
		in := d.LossFnInputs
		target := in["target_tokens"].Data
		weights := in["weights"].Data
		seq := append(append([]int(nil), toks...), int(target[len(target)-1]))
		var positions []int
		var idx []int
		sumW := 0.0
		for i := range toks {
			if i+1 < len(toks) && int(target[i]) != toks[i+1] {
				return http.StatusBadRequest, map[string]any{"detail": fmt.Sprintf("target_tokens[%d] is not the next model input token: the simulator trains next-token datums only", i)}
			}
			if weights[i] > 0 {
				positions = append(positions, i+1)
				idx = append(idx, i)
				sumW += weights[i]
			}
		}
		lps := s.model.LogProbGrad(m.params, seq, positions, nil, nil)
		coef := make([]float64, len(positions))
		// JAX (jax.py loss_for_lora): each datum's loss is its weighted
		// token sum over the sum of its weights, a per-sequence mean (the
		// step then averages over datums, optim_step). FSDP
		// (skyrl_train_backend.py _to_training_batch, ppo_utils.py
		// reduce_loss): the weights are the loss mask of a plain token
		// sum, over every datum of the step.
		norm := sumW
		if s.Backend == BackendFSDP {
			norm = 1
		}
		elementwise := make([]float64, len(toks))
		for j, i := range idx {
			w := weights[i] / norm
			switch lossFn {
			case "cross_entropy":
				coef[j] = w
				lossSum -= w * lps[j]
				elementwise[i] = -weights[i] * lps[j]
			default:
				a := in["advantages"].Data[i]
				ratio := math.Exp(lps[j] - in["logprobs"].Data[i])
				lossSum -= w * ratio * a
				elementwise[i] = -weights[i] * ratio * a
				if lossFn == "ppo" && ((a > 0 && ratio > clipHigh) || (a < 0 && ratio < clipLow)) {
					elementwise[i] = -weights[i] * min(ratio*a, math.Max(clipLow, math.Min(ratio, clipHigh))*a)
					clipped++
					continue
				}
				coef[j] = w * ratio * a
			}
		}
		tokens += len(positions)
		// Ascent direction of the objective: sum coef * grad log p.
		grad := make([]float64, lm.NumParams)
		s.model.LogProbGrad(m.params, seq, positions, coef, grad)
		raw, _ := json.Marshal(d)
		sum := sha256.Sum256(raw)
		if accumulate {
			m.pending = append(m.pending, datumGrad{key: hex.EncodeToString(sum[:]), grad: grad})
		}
		out := make([]float64, len(toks))
		for j, i := range idx {
			out[i] = lps[j]
		}
		o := map[string]any{"logprobs": map[string]any{"data": float32s(out), "dtype": "float32", "shape": []int{len(out)}}}
		if s.Backend != BackendFSDP {
			o["elementwise_loss"] = map[string]any{"data": float32s(elementwise), "dtype": "float32", "shape": []int{len(elementwise)}}
		}
		outputs = append(outputs, o)
	}
	if s.Backend != BackendFSDP {
		// skyrl 0.3.0's JAX backend (jax.py _model_pass, seen running):
		// per-token losses beside the logprobs, "scalar", and no metrics.
		// Its logprobs cover every position; the simulator's only the
		// weighted ones (0 elsewhere), which the program never reads.
		return http.StatusOK, map[string]any{"loss_fn_output_type": "scalar", "loss_fn_outputs": outputs,
			"metrics": map[string]float64{}, "type": "forward_backward"}
	}
	return http.StatusOK, map[string]any{
		"loss_fn_output_type": "TensorData", "loss_fn_outputs": outputs,
		"metrics": map[string]float64{"loss:sum": lossSum, "clipped:sum": float64(clipped), "tokens:sum": float64(tokens)},
		"type":    "forward_backward",
	}
}

func float32s(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

func (s *Server) optimStep(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ModelID    string `json:"model_id"`
		SeqID      int    `json:"seq_id"`
		AdamParams struct {
			LearningRate float64 `json:"learning_rate"`
			Beta1        float64 `json:"beta1"`
			Beta2        float64 `json:"beta2"`
			Eps          float64 `json:"eps"`
			WeightDecay  float64 `json:"weight_decay"`
		} `json:"adam_params"`
		Type string `json:"type"`
	}
	if err := s.ignored.Decode(w, r, r.Pattern, &req); err != nil {
		detail(w, http.StatusUnprocessableEntity, "%v", err)
		return
	}
	a := req.AdamParams
	// SkyRL's AdamParams (skyrl/tinker/api.py, skyrl 0.3.0): learning_rate
	// and weight_decay ge 0 (a zero rate is accepted: verl's warmup starts
	// there), beta1 and beta2 in [0, 1), eps gt 0; pydantic refuses the
	// rest with 422.
	if a.LearningRate < 0 || a.WeightDecay < 0 || a.Beta1 < 0 || a.Beta1 >= 1 || a.Beta2 < 0 || a.Beta2 >= 1 || a.Eps <= 0 {
		detail(w, http.StatusUnprocessableEntity, "invalid adam_params %+v", a)
		return
	}
	s.sequenced(w, req.ModelID, req.SeqID, req, s.StepDelay, 0, nil, func(m *trainedModel) (int, any) {
		// Sum the datums' gradients in a canonical order, so the update does
		// not depend on the order the chunks arrived in.
		sort.Slice(m.pending, func(i, j int) bool { return m.pending[i].key < m.pending[j].key })
		g := make([]float64, lm.NumParams)
		for _, d := range m.pending {
			for j, v := range d.grad {
				g[j] -= v // loss gradient = minus the ascent direction
			}
		}
		n := len(m.pending)
		m.pending = nil
		norm := 0.0
		if n > 0 {
			// JAX averages the accumulated gradient over the step's datums
			// (AccumulatedGradients.get_mean); FSDP keeps the token sum.
			for j := range g {
				if s.Backend != BackendFSDP {
					g[j] /= float64(n)
				}
				norm += g[j] * g[j]
			}
			norm = math.Sqrt(norm)
			// FSDP clips the gradient's global L2 norm at max_grad_norm
			// (1.0) before every step, as torch's clip_grad_norm_ does
			// (fsdp_strategy.py optimizer_step); grad_norm reports the norm
			// before clipping. JAX's optax.adamw does not clip.
			if s.Backend == BackendFSDP {
				if c := fsdpMaxGradNorm / (norm + 1e-6); c < 1 {
					for j := range g {
						g[j] *= c
					}
				}
			}
			m.t++
			b1, b2 := a.Beta1, a.Beta2
			for j := range g {
				m.m[j] = b1*m.m[j] + (1-b1)*g[j]
				m.v[j] = b2*m.v[j] + (1-b2)*g[j]*g[j]
				mh := m.m[j] / (1 - math.Pow(b1, float64(m.t)))
				vh := m.v[j] / (1 - math.Pow(b2, float64(m.t)))
				m.params[j] -= a.LearningRate * (mh/(math.Sqrt(vh)+a.Eps) + a.WeightDecay*m.params[j])
			}
		}
		return http.StatusOK, map[string]any{"metrics": map[string]float64{"grad_norm": norm, "datums": float64(n)}, "type": "optim_step"}
	})
}

// fsdpMaxGradNorm is SkyRL's OptimizerConfig.max_grad_norm default
// (skyrl/train/config/config.py), the norm its FSDP backend clips every
// step's gradient to.
const fsdpMaxGradNorm = 1.0

var reName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// saveRequest is the body of save_weights_for_sampler and save_weights.
type saveRequest struct {
	ModelID string `json:"model_id"`
	Path    string `json:"path"`
	SeqID   int    `json:"seq_id"`
	Type    string `json:"type"`
}

// decodeSave decodes a save request and checks its name; false means an
// error was answered.
func (s *Server) decodeSave(w http.ResponseWriter, r *http.Request) (saveRequest, bool) {
	var req saveRequest
	if err := s.ignored.Decode(w, r, r.Pattern, &req); err != nil {
		detail(w, http.StatusUnprocessableEntity, "%v", err)
		return req, false
	}
	if !reName.MatchString(req.Path) {
		detail(w, http.StatusBadRequest, "path %q must match ^[A-Za-z0-9_-]+$", req.Path)
		return req, false
	}
	return req, true
}

// newCheckpoint is the admit step of a save: as SkyRL's create_checkpoint,
// a name the model already has (of that kind, in any state) is a 409;
// otherwise the checkpoint is recorded, pending, in *ck (removed again if
// the call is then refused).
func (s *Server) newCheckpoint(kind, name string, ck **checkpoint) func(m *trainedModel) (int, string, func()) {
	return func(m *trainedModel) (int, string, func()) {
		s.ckMu.Lock()
		defer s.ckMu.Unlock()
		key := checkpointKey(kind, name)
		if _, ok := m.ckpts[key]; ok {
			return http.StatusConflict, fmt.Sprintf("Checkpoint '%s' already exists for model '%s'", name, m.id), nil
		}
		*ck = &checkpoint{name: name, kind: kind, status: "pending"}
		m.ckpts[key] = *ck
		return 0, "", func() {
			s.ckMu.Lock()
			delete(m.ckpts, key)
			s.ckMu.Unlock()
		}
	}
}

// finishCheckpoint records a save's outcome (err nil: completed).
func (s *Server) finishCheckpoint(ck *checkpoint, err error) {
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	ck.completed = time.Now().UTC()
	ck.status = "completed"
	if err != nil {
		ck.status, ck.errMsg = "failed", err.Error()
	}
}

// samplerSaveRequest is SkyRL's SaveWeightsForSamplerRequest: a named
// save (path) or the SDK's ephemeral one (sampling_session_seq_id and
// seq_id, no path).
type samplerSaveRequest struct {
	ModelID              string  `json:"model_id"`
	Path                 *string `json:"path"`
	SamplingSessionSeqID *int    `json:"sampling_session_seq_id"`
	SeqID                *int    `json:"seq_id"`
	Type                 string  `json:"type"`
}

// saveWeights implements save_weights_for_sampler as SkyRL's api.py and
// engine.py do: the checkpoint is named path, or ss<N>_seq<M> for an
// ephemeral save, which also makes a sampling session over
// tinker://<model_id>/sampler_weights/<name> in the model's session at
// once (usable when the save completes: asample answers 425 before). An
// ephemeral save is transient (persist=False): the FSDP backend writes a
// marker in place of the weights, the JAX backend its adapter archive
// anyway. Its result has no path and names the sampling session; a named
// save's path is tinker://<model_id>/<name>.
func (s *Server) saveWeights(w http.ResponseWriter, r *http.Request) {
	var req samplerSaveRequest
	if err := s.ignored.Decode(w, r, r.Pattern, &req); err != nil {
		detail(w, http.StatusUnprocessableEntity, "%v", err)
		return
	}
	ephemeral := req.SamplingSessionSeqID != nil && req.SeqID != nil
	name := ""
	switch {
	case req.Path != nil && *req.Path != "":
		if !reName.MatchString(*req.Path) {
			detail(w, http.StatusBadRequest, "path %q must match ^[A-Za-z0-9_-]+$", *req.Path)
			return
		}
		name = *req.Path
	case ephemeral:
		name = fmt.Sprintf("ss%d_seq%d", *req.SamplingSessionSeqID, *req.SeqID)
	default:
		detail(w, http.StatusUnprocessableEntity, "Value error, Either 'path' or both 'sampling_session_seq_id' and 'seq_id' must be provided")
		return
	}
	seq := 0
	if req.SeqID != nil {
		seq = *req.SeqID
	}
	var ck *checkpoint
	var sessionID any
	admitCk := s.newCheckpoint("sampler", name, &ck)
	admit := func(m *trainedModel) (int, string, func()) {
		st, msg, undo := admitCk(m)
		if st != 0 || !ephemeral {
			return st, msg, undo
		}
		ss := &samplingSession{id: s.newSamplingID(), session: m.session, seq: *req.SamplingSessionSeqID,
			modelPath: "tinker://" + m.id + "/sampler_weights/" + name}
		s.samplingSessions[ss.id] = ss
		sessionID = ss.id
		return 0, "", func() {
			delete(s.samplingSessions, ss.id)
			undo()
		}
	}
	s.sequenced(w, req.ModelID, seq, req, s.StepDelay, 0, admit, func(m *trainedModel) (int, any) {
		snap := samplerSnapshot(m)
		if m.samplers == nil {
			m.samplers = map[string]lm.Params{}
		}
		m.samplers[name], m.synced = snap, snap
		// A LoRA model's sampler weights are an adapter; rank 0 (full
		// fine-tuning) exports the whole model, as SkyRL's FSDP backend.
		var arc []byte
		var err error
		switch {
		case ephemeral && s.Backend == BackendFSDP:
			arc, err = markerArchive(m.id)
		case m.rank == 0:
			arc, err = weights.PackFullWeights(s.Archive, m.params, s.baseModel)
		default:
			arc, err = weights.PackAdapter(s.Archive, m.params, s.baseModel, m.rank)
		}
		if err == nil {
			err = writeFileAtomic(filepath.Join(s.ckptDir, m.id, "sampler_weights", name+".tar.gz"), arc)
		}
		s.finishCheckpoint(ck, err)
		s.notePeak()
		if err != nil {
			return http.StatusInternalServerError, map[string]any{"detail": fmt.Sprintf("save sampler weights: %v", err)}
		}
		if ephemeral {
			return http.StatusOK, map[string]any{"path": nil, "type": "save_weights_for_sampler", "sampling_session_id": sessionID}
		}
		// SkyRL's engine.py process_save_weights_for_sampler answers
		// tinker://<model_id>/<name>, though it writes under
		// sampler_weights/.
		return http.StatusOK, map[string]any{"path": "tinker://" + m.id + "/" + name, "type": "save_weights_for_sampler", "sampling_session_id": nil}
	})
}

func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func (s *Server) retrieveFuture(w http.ResponseWriter, r *http.Request) {
	var req struct {
		RequestID string `json:"request_id"`
	}
	if err := s.ignored.Decode(w, r, r.Pattern, &req); err != nil {
		detail(w, http.StatusUnprocessableEntity, "%v", err)
		return
	}
	s.mu.Lock()
	f, ok := s.futures[req.RequestID]
	s.mu.Unlock()
	if !ok {
		detail(w, http.StatusNotFound, "Future not found")
		return
	}
	t := time.NewTimer(s.PollWait)
	defer t.Stop()
	select {
	case <-f.done:
		if pb, ok := sampleProtobuf(f.body); ok && f.sample && f.status == http.StatusOK && strings.Contains(strings.ToLower(r.Header.Get("Accept")), protobufAccept) {
			w.Header().Set("Content-Type", protobufAccept)
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(pb)
		} else {
			httpx.WriteJSON(w, f.status, f.body)
		}
		if f.sample {
			s.mu.Lock()
			s.noteRetrieved(req.RequestID)
			s.mu.Unlock()
		}
	case <-t.C:
		// SkyRL (api.py retrieve_future) holds the poll, then answers 408;
		// the hosted service answers 200 try_again instead.
		if s.TryAgain {
			httpx.WriteJSON(w, http.StatusOK, map[string]any{"type": "try_again", "request_id": req.RequestID, "queue_state": "active"})
		} else {
			detail(w, http.StatusRequestTimeout, "Timeout waiting for result")
		}
	case <-r.Context().Done():
	case <-s.done:
		detail(w, http.StatusServiceUnavailable, "simulated trainer shutting down")
	}
}

// checkpointReady is SkyRL's validate_checkpoint for a training state:
// 404 unknown, 425 still pending, 500 failed, 0 ready. A state this server
// has no record of (one saved before a restart: the simulator keeps no
// database) is ready when its file exists. Called with mu held.
func (s *Server) checkpointReady(source, name string) (int, string) {
	if src := s.models[source]; src != nil {
		s.ckMu.Lock()
		ck := src.ckpts[checkpointKey("training", name)]
		s.ckMu.Unlock()
		switch {
		case ck == nil:
		case ck.status == "pending":
			return http.StatusTooEarly, "Checkpoint is still being created"
		case ck.status == "failed":
			return http.StatusInternalServerError, "Checkpoint creation failed: " + ck.errMsg
		default:
			return 0, ""
		}
	}
	if _, err := os.Stat(filepath.Join(s.ckptDir, source, name+".tar.gz")); err != nil {
		return http.StatusNotFound, fmt.Sprintf("Checkpoint not found: %s/%s", source, name)
	}
	return 0, ""
}

// ModelParams returns a copy of a trained model's current parameters.
func (s *Server) ModelParams(modelID string) (lm.Params, bool) {
	s.mu.Lock()
	m, ok := s.models[modelID]
	s.mu.Unlock()
	if !ok {
		return nil, false
	}
	s.trainMu.Lock()
	defer s.trainMu.Unlock()
	return append(lm.Params(nil), m.params...), true
}

// trainState is a saved training state: parameters and Adam moments.
type trainState struct {
	Simulated bool      `json:"hindsearch_simulator"`
	Params    []float64 `json:"params"`
	M         []float64 `json:"adam_m"`
	V         []float64 `json:"adam_v"`
	T         int       `json:"adam_t"`
}

// stateFile is the file of a saved training state's archive.
const stateFile = "hindsearch_sim_state.json"

// saveState implements save_weights: the full training state, as JSON in an
// archive (layout Archive) at <checkpoints>/<model_id>/<name>.tar.gz, where
// SkyRL's engine.py process_save_weights writes a training checkpoint; the
// answer is tinker://<model_id>/weights/<name>.
func (s *Server) saveState(w http.ResponseWriter, r *http.Request) {
	req, ok := s.decodeSave(w, r)
	if !ok {
		return
	}
	var ck *checkpoint
	s.sequenced(w, req.ModelID, req.SeqID, req, s.StepDelay, 0, s.newCheckpoint("training", req.Path, &ck), func(m *trainedModel) (int, any) {
		b, _ := json.Marshal(trainState{Simulated: true, Params: m.params, M: m.m, V: m.v, T: m.t})
		arc, err := weights.PackArchive(s.Archive, map[string][]byte{stateFile: b})
		if err == nil {
			err = writeFileAtomic(filepath.Join(s.ckptDir, m.id, req.Path+".tar.gz"), arc)
		}
		s.finishCheckpoint(ck, err)
		s.notePeak()
		if err != nil {
			return http.StatusInternalServerError, map[string]any{"detail": fmt.Sprintf("save weights: %v", err)}
		}
		return http.StatusOK, map[string]any{"path": "tinker://" + m.id + "/weights/" + req.Path, "type": "save_weights"}
	})
}

// loadState implements load_weights: restores a saved state (with the
// optimiser state) into the model.
func (s *Server) loadState(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ModelID   string `json:"model_id"`
		Path      string `json:"path"`
		Optimizer bool   `json:"optimizer"`
		SeqID     int    `json:"seq_id"`
		Type      string `json:"type"`
	}
	if err := s.ignored.Decode(w, r, r.Pattern, &req); err != nil {
		detail(w, http.StatusUnprocessableEntity, "%v", err)
		return
	}
	rest, ok := strings.CutPrefix(req.Path, "tinker://")
	parts := strings.Split(rest, "/")
	// SkyRL's order: the model (404), then load_weights only as the
	// model's first request (400), then the path's form (400), then the
	// checkpoint (404 unknown, 425 pending, 500 failed).
	admit := func(m *trainedModel) (int, string, func()) {
		if m.requests > 0 {
			return http.StatusBadRequest, fmt.Sprintf("LoadWeights is not permitted with seq_id %d", req.SeqID), nil
		}
		if !ok || len(parts) != 3 || parts[1] != "weights" || !reName.MatchString(parts[2]) || !reName.MatchString(parts[0]) {
			return http.StatusBadRequest, "request.path must be in format tinker://source_model_id/weights/checkpoint_id", nil
		}
		st, msg := s.checkpointReady(parts[0], parts[2])
		return st, msg, nil
	}
	s.sequenced(w, req.ModelID, req.SeqID, req, s.StepDelay, 0, admit, func(m *trainedModel) (int, any) {
		b, err := weights.ReadArchiveFile(filepath.Join(s.ckptDir, parts[0], parts[2]+".tar.gz"), stateFile)
		if err != nil {
			return http.StatusBadRequest, map[string]any{"detail": fmt.Sprintf("load weights %s: %v", req.Path, err)}
		}
		var st trainState
		if err := json.Unmarshal(b, &st); err != nil || len(st.Params) != int(lm.NumParams) || len(st.M) != int(lm.NumParams) || len(st.V) != int(lm.NumParams) {
			return http.StatusBadRequest, map[string]any{"detail": fmt.Sprintf("load weights %s: not a simulator training state", req.Path)}
		}
		copy(m.params, st.Params)
		if req.Optimizer {
			copy(m.m, st.M)
			copy(m.v, st.V)
			m.t = st.T
		}
		m.pending = nil
		return http.StatusOK, map[string]any{"path": req.Path, "type": "load_weights"}
	})
}

// CheckpointSizes returns the bytes of one training state and of one
// sampler archive as this simulator writes them for baseModel at rank, in
// layout: what its checkpoint directory needs per saved state and per
// sampler export (doctor sizes the disk with them).
func CheckpointSizes(layout weights.ArchiveLayout, baseModel string, rank int) (state, sampler int64, err error) {
	p := lm.InitialParams()
	z := make([]float64, lm.NumParams)
	b, _ := json.Marshal(trainState{Simulated: true, Params: p, M: z, V: z})
	st, err := weights.PackArchive(layout, map[string][]byte{stateFile: b})
	if err != nil {
		return 0, 0, err
	}
	var sa []byte
	if rank == 0 {
		sa, err = weights.PackFullWeights(layout, p, baseModel)
	} else {
		sa, err = weights.PackAdapter(layout, p, baseModel, rank)
	}
	return int64(len(st)), int64(len(sa)), err
}
