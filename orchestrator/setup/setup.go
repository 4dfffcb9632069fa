// Package setup builds what a recipe's run drives: it fills the recipe's
// run defaults, starts the embedded implementation of every role whose URL
// is "embedded" (the simulated policy, judge and trainer, the BM25
// retriever) on loopback ports, builds one client per role over the one
// transport, and resolves the policy model's local tokenizer.
package setup

import (
	"context"
	"errors"
	"fmt"
	"github.com/hindsearch/hindsearch/clients/tracker/mlflow"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/hindsearch/hindsearch/clients/judge"
	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/sglang"
	"github.com/hindsearch/hindsearch/clients/policy/tinker"
	"github.com/hindsearch/hindsearch/clients/retriever"
	"github.com/hindsearch/hindsearch/clients/retriever/bm25"
	"github.com/hindsearch/hindsearch/clients/router"
	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/orchestrator/dataset"
	"github.com/hindsearch/hindsearch/orchestrator/metrics"
	"github.com/hindsearch/hindsearch/orchestrator/progress"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/sim"
	"github.com/hindsearch/hindsearch/sim/lm"
	simtrainer "github.com/hindsearch/hindsearch/sim/trainer"
	"github.com/hindsearch/hindsearch/sim/weights"
)

// ApplyRunDefaults fills the recipe's directory defaults that depend on
// other keys: trainer.checkpoints_dir and sync.dir under output.dir, and
// retriever.index_dir under the user cache directory. A remote trainer
// needs trainer.checkpoints_dir set explicitly (SkyRL's checkpoints base on a
// filesystem shared with this machine), unless sync.kind is tinker,
// which reads no sampler archive.
func ApplyRunDefaults(r *recipes.Recipe) error {
	// The data a data: path names must be on this machine now.
	if err := r.MissingData(); err != nil {
		return fmt.Errorf("data: %w", err)
	}
	switch {
	case r.Trainer.CheckpointsDir != "":
	case r.Trainer.URL == recipes.Embedded:
		r.Trainer.CheckpointsDir = filepath.Join(r.Output.Dir, "checkpoints")
	case r.Sync.Kind != recipes.SyncTinker:
		return errors.New("trainer.checkpoints_dir: required with a remote trainer: set it to the trainer's checkpoints base, on a filesystem this machine can read")
	}
	if r.Sync.Dir == "" {
		r.Sync.Dir = filepath.Join(r.Output.Dir, "adapters")
	}
	if r.Retriever.IndexDir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		r.Retriever.IndexDir = filepath.Join(cache, "hindsearch", "bm25")
	}
	return nil
}

// Embedded are the in-process servers a recipe started.
type Embedded struct {
	sim   *sim.Servers
	index *bm25.Index
	srv   *http.Server
	ret   *sim.DelayedRetriever
	// retFaults injects the retriever's faults (nil: none).
	retFaults *sim.Faulty
	// closers release what Connect made beside the servers (the Tinker
	// policy clients' sessions).
	closers []func()
}

// FaultsInjected is the number of faults the embedded servers injected.
func (e *Embedded) FaultsInjected() int64 {
	n := int64(0)
	if e.sim != nil {
		n += e.sim.FaultsInjected()
	}
	if e.retFaults != nil {
		n += e.retFaults.Injected()
	}
	return n
}

// Retriever returns the embedded retriever's handler with its call counts
// (nil when the retriever is not embedded).
func (e *Embedded) Retriever() *sim.DelayedRetriever { return e.ret }

// Sim returns the simulated servers (nil when none were started).
func (e *Embedded) Sim() *sim.Servers { return e.sim }

// Close stops the embedded servers.
func (e *Embedded) Close() {
	if e == nil {
		return
	}
	for _, c := range e.closers {
		c()
	}
	if e.sim != nil {
		e.sim.Close()
	}
	if e.retFaults != nil {
		e.retFaults.Close()
	}
	if e.srv != nil {
		// A short grace, as sim.Servers.Close: a client's spare
		// connection would otherwise hold Shutdown for 5 s.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if e.srv.Shutdown(ctx) != nil {
			_ = e.srv.Close()
		}
		cancel()
	}
	if e.index != nil {
		_ = e.index.Close()
	}
}

// serveIndex serves ix on a loopback port with documents in style, the
// simulator's retriever latency and faults.
func (e *Embedded) serveIndex(ix *bm25.Index, style bm25.Style, lat sim.Latency, faults sim.Faults) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("embedded retriever: %w", err)
	}
	e.index = ix
	// The simulator's retriever latency (sim.retriever_*), zero by default.
	e.ret = sim.NewDelayedRetriever(ix.Handler(style), lat.RetrieverBatch, lat.RetrieverQuery)
	var h http.Handler = e.ret
	if faults.Rate > 0 {
		e.retFaults = sim.NewFaulty(e.ret, faults)
		h = e.retFaults
	}
	e.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = e.srv.Serve(l) }()
	return "http://" + l.Addr().String(), nil
}

// Option adds an optional service to Connect.
type Option func(*connectConfig)

type connectConfig struct {
	metrics  *metrics.Metrics
	progress *progress.Reporter
	// simFaults, when set, changes the embedded simulator's faults after
	// they are read from the recipe (tests aim faults at routes with it).
	simFaults func(*sim.RoleFaults)
	// loadTokenizer loads policy.tokenizer files (nil: loadTokenizerFile).
	loadTokenizer TokenizerLoader
}

// WithTokenizerLoader makes Connect load policy.tokenizer files (and the
// one auto finds in the Hugging Face cache) with load instead of the
// built-in loader.
func WithTokenizerLoader(load TokenizerLoader) Option {
	return func(c *connectConfig) { c.loadTokenizer = load }
}

// WithSimFaults lets f change the embedded simulator's faults after they
// are read from the recipe's sim.faults (tests and chaos aim faults at
// single routes with it); it changes nothing without an embedded
// simulator.
func WithSimFaults(f func(*sim.RoleFaults)) Option {
	return func(c *connectConfig) { c.simFaults = f }
}

// WithMetrics makes every client report its calls and retries to m.
func WithMetrics(m *metrics.Metrics) Option { return func(c *connectConfig) { c.metrics = m } }

// WithProgress shows the embedded index build's progress on p.
func WithProgress(p *progress.Reporter) Option {
	return func(c *connectConfig) { c.progress = p }
}

// Connect starts the embedded implementation of every role whose URL is
// "embedded" (on loopback ports) and returns a client per role and the
// local tokenizer policy.tokenizer names (Deps.Tokenizer, or why there is
// none in Deps.TokenizerErr). environ is where API keys and the Hugging
// Face cache variables are read from. log receives start-up messages such
// as the index build's and which tokenizer file auto picked.
func Connect(ctx context.Context, r *recipes.Recipe, environ []string, log io.Writer, options ...Option) (roles.Deps, *Embedded, error) {
	if log == nil {
		log = io.Discard
	}
	var cfg connectConfig
	for _, o := range options {
		o(&cfg)
	}
	env := recipes.EnvMap(environ)
	key := func(name string) string {
		if name == "" {
			return ""
		}
		return env[name]
	}
	e := &Embedded{}
	var deps roles.Deps
	fail := func(err error) (roles.Deps, *Embedded, error) {
		e.Close()
		return roles.Deps{}, nil, err
	}

	// Embedded vLLM or SGLang replicas are simulated policy servers; an
	// embedded Tinker policy is the embedded trainer's sampling routes.
	nEmbedded := 0
	if r.Policy.Server != recipes.ServerTinker {
		nEmbedded = recipes.EmbeddedCount(r.Policy.URLs)
	}
	// An embedded reference is a simulated policy server of its own, which
	// no sync ever reaches: the simulated base model.
	nRef := recipes.EmbeddedCount(r.Reference.URLs)
	needSim := nEmbedded > 0 || nRef > 0 || r.Judge.URL == recipes.Embedded || r.Trainer.URL == recipes.Embedded
	if needSim {
		corpus, err := dataset.LoadCorpus(r.Retriever.Corpus)
		if err != nil {
			return fail(fmt.Errorf("retriever.corpus: %w", err))
		}
		faults := sim.FaultsFromRecipe(r.Sim.Faults, r.Seed)
		if cfg.simFaults != nil {
			cfg.simFaults(&faults)
		}
		answers, err := dataset.Answers(r)
		if err != nil {
			return fail(err)
		}
		gen := lm.GenerationConfigFromRecipe(r.Sim.GenerationConfig)
		s, err := sim.Start(sim.Config{BaseModel: r.Policy.Model, JudgeModel: r.Judge.Model, JudgeAPIKey: key(r.Judge.APIKeyEnv),
			CheckpointsDir: r.Trainer.CheckpointsDir, TrainerArchive: weights.ArchiveLayout(r.Sim.Trainer.Archive), TrainerBackend: simtrainer.Backend(r.Sim.Trainer.Backend), TrainerNoDeleteRoute: !r.Sim.Trainer.DeleteRoute, PrefillNoise: r.Sim.Policy.PrefillNoise, Agent: SimAgent(r.Sim.Agent), Corpus: corpus, Answers: answers, Epsilon: r.Sim.Epsilon,
			PolicyReplicas: nEmbedded + nRef, Judge: r.Judge.URL == recipes.Embedded, Trainer: r.Trainer.URL == recipes.Embedded,
			Latency: sim.LatencyFromRecipe(r.Sim), Faults: faults, GenerationConfig: &gen})
		if err != nil {
			return fail(err)
		}
		e.sim = s
		if r.Trainer.URL == recipes.Embedded && r.Trainer.BaseModel != r.Policy.Model {
			return fail(fmt.Errorf("trainer.base_model %q must equal policy.model %q with the embedded simulator", r.Trainer.BaseModel, r.Policy.Model))
		}
		if nEmbedded > 0 {
			deps.Simulated = append(deps.Simulated, "policy")
		}
		if nRef > 0 {
			deps.Simulated = append(deps.Simulated, "reference")
		}
		if s.JudgeURL != "" {
			deps.Simulated = append(deps.Simulated, "judge")
		}
		if s.TrainerURL != "" {
			deps.Simulated = append(deps.Simulated, "trainer")
		}
	}
	opts := func(role, url string) transport.Options { return httpOptions(r, role, url, cfg.metrics) }
	ju := r.Judge.URL
	if ju == recipes.Embedded {
		ju = e.sim.JudgeURL
	}
	if r.Judge.API == recipes.JudgeAPITinker {
		j, close, err := tinkerJudge(r, opts("judge", ju), key(r.Judge.APIKeyEnv), env, cfg.loadTokenizer)
		if err != nil {
			return fail(fmt.Errorf("judge.url: %w", err))
		}
		if close != nil {
			e.closers = append(e.closers, close)
		}
		deps.Judge = j
	} else {
		jc, err := judge.New(opts("judge", ju), r.Judge.Model, key(r.Judge.APIKeyEnv), roles.JudgeOptions(r)...)
		if err != nil {
			return fail(fmt.Errorf("judge.url: %w", err))
		}
		deps.Judge = jc
	}
	tu := r.Trainer.URL
	if tu == recipes.Embedded {
		tu = e.sim.TrainerURL
	}
	if r.Tracking.MLflow.TrackingURI != "" {
		mc, err := MLflow(r, environ, cfg.metrics)
		if err != nil {
			return fail(err)
		}
		deps.MLflow = mc
	}
	tc, err := trainer.New(opts("trainer", tu), key(r.Trainer.APIKeyEnv))
	if err != nil {
		return fail(fmt.Errorf("trainer.url: %w", err))
	}
	deps.Trainer = tc
	ru := r.Retriever.URL
	if ru == recipes.Embedded {
		t0 := time.Now()
		prog, endProgress, built := BM25Progress(cfg.progress, log, r.Retriever.Corpus, r.Retriever.IndexDir)
		ix, err := bm25.OpenWith(ctx, r.Retriever.Corpus, r.Retriever.IndexDir, bm25.Params{K1: r.Retriever.BM25K1, B: r.Retriever.BM25B}, prog)
		endProgress()
		if err != nil {
			return fail(fmt.Errorf("embedded retriever: %w", err))
		}
		if built() {
			fmt.Fprintf(log, "BM25 index of %d passages built in %.1fs\n", ix.Len(), time.Since(t0).Seconds())
		}
		style, err := bm25.ParseStyle(r.Sim.RetrieverStyle)
		if err == nil {
			ru, err = e.serveIndex(ix, style, sim.LatencyFromRecipe(r.Sim), sim.FaultsFromRecipe(r.Sim.Faults, r.Seed).Retriever)
		}
		if err != nil {
			_ = ix.Close()
			return fail(err)
		}
	}
	rc, err := retriever.New(opts("retriever", ru))
	if err != nil {
		return fail(fmt.Errorf("retriever.url: %w", err))
	}
	deps.Retriever = rc
	// A missing tokenizer is not fatal here: doctor reports it with its
	// fix, and a run refuses to start without one.
	load := cfg.loadTokenizer
	if load == nil {
		load = loadTokenizerFile
	}
	deps.Tokenizer, deps.TokenizerErr = connectTokenizer(r, env, e.sim, load, func(line string) { fmt.Fprintln(log, line) })
	// The policy clients come last: a Tinker policy reads the sampled ids
	// with the local tokenizer.
	simURL := 0
	for _, u := range r.Policy.URLs {
		if u == recipes.Embedded {
			if r.Policy.Server == recipes.ServerTinker {
				u = e.sim.TrainerURL
			} else {
				u = e.sim.PolicyURLs[simURL]
				simURL++
			}
		}
		po := opts("policy", u)
		po.PoolSize = PolicyPoolSize(r)
		c, err := newPolicy(r, po, key(r.Trainer.APIKeyEnv), deps.Tokenizer)
		if err != nil {
			return fail(fmt.Errorf("policy.urls: %w", err))
		}
		if tc, ok := c.(*tinker.Client); ok {
			e.closers = append(e.closers, tc.Close)
		}
		deps.Policies = append(deps.Policies, c)
	}
	if r.Policy.Server == recipes.ServerTinker && slices.Contains(r.Policy.URLs, recipes.Embedded) {
		deps.Simulated = append(deps.Simulated, "policy")
	}
	if u := r.Policy.RouterURL; u != "" {
		// Generation and scoring through the router share the replicas'
		// pool size; the worker list's calls are few.
		po := opts("policy", u)
		po.PoolSize = PolicyPoolSize(r) * max(len(deps.Policies), 1)
		pc, err := policy.New(po)
		if err != nil {
			return fail(fmt.Errorf("policy.router_url: %w", err))
		}
		rc, err := router.New(opts("router", u))
		if err != nil {
			return fail(fmt.Errorf("policy.router_url: %w", err))
		}
		deps.Router, deps.RouterAdmin = pc, rc
	}
	if r.Policy.EndpointsFile != "" {
		tok, apiKey := deps.Tokenizer, key(r.Trainer.APIKeyEnv)
		deps.NewPolicy = func(u string) (policy.Policy, error) {
			po := opts("policy", u)
			po.PoolSize = PolicyPoolSize(r)
			return newPolicy(r, po, apiKey, tok)
		}
	}
	refSim := nEmbedded
	for i, u := range r.Reference.URLs {
		if u == recipes.Embedded {
			u = e.sim.PolicyURLs[refSim]
			refSim++
		}
		rr := *r
		rr.Policy.Server = r.Reference.Server
		c, err := newPolicy(&rr, opts("reference", u), "", deps.Tokenizer)
		if err != nil {
			return fail(fmt.Errorf("reference.urls[%d]: %w", i, err))
		}
		deps.References = append(deps.References, c)
	}
	if r.Trainer.Backend == recipes.BackendAuto && r.Trainer.URL != recipes.Embedded {
		rr := *r
		rr.Policy.Server, rr.Policy.Model, rr.Policy.Concurrency = recipes.ServerTinker, r.Trainer.BaseModel, 1
		c, err := newPolicy(&rr, opts("trainer", tu), key(r.Trainer.APIKeyEnv), deps.Tokenizer)
		if err != nil {
			return fail(fmt.Errorf("trainer.url: %w", err))
		}
		e.closers = append(e.closers, c.(*tinker.Client).Close)
		deps.TrainerSampler = c
	}
	return deps, e, nil
}

// LoadAndConnect loads the recipe at path with its overrides, fills its run
// defaults and connects to (or starts) every server it names; close the
// returned servers when done.
func LoadAndConnect(ctx context.Context, path string, sets, environ []string, log io.Writer, options ...Option) (*recipes.Recipe, roles.Deps, *Embedded, error) {
	r, err := recipes.Load(path, sets, environ)
	if err != nil {
		return nil, roles.Deps{}, nil, err
	}
	if err := ApplyRunDefaults(r); err != nil {
		return nil, roles.Deps{}, nil, err
	}
	deps, emb, err := Connect(ctx, r, environ, log, options...)
	return r, deps, emb, err
}

// PolicyPoolSize is the connection pool of one policy replica's client:
// http.pool_size, raised to what the replica can have in flight at once,
// policy.concurrency rollout calls plus judge.concurrency groups' teacher
// scoring (each an HTTP/1.1 request of its own, or for a Tinker policy an
// asample whose retrieve_future poll holds a connection). A smaller pool
// would cap the concurrency the recipe asks for without a word (source
// audit C7: 512 asamples through 64 connections).
func PolicyPoolSize(r *recipes.Recipe) int {
	return max(r.HTTP.PoolSize, r.Policy.Concurrency+r.Judge.Concurrency)
}

// newPolicy builds the client of one policy replica for policy.server:
// vLLM's OpenAI-compatible API, SGLang's native /generate (embedded
// replicas included: the simulator serves both), or a Tinker server's
// sampling routes (apiKey is trainer.api_key_env's: the same service;
// tok reads the sampled ids).
func newPolicy(r *recipes.Recipe, o transport.Options, apiKey string, tok *roles.Tokenizer) (policy.Policy, error) {
	switch r.Policy.Server {
	case recipes.ServerSGLang:
		return sglang.New(o, r.Policy.Model)
	case recipes.ServerTinker:
		tc, err := trainer.New(o, apiKey)
		if err != nil {
			return nil, err
		}
		opts := tinker.Options{BaseModel: r.Policy.Model, MaxInFlight: r.Policy.Concurrency,
			Protobuf: r.Policy.TinkerResults == recipes.TinkerResultsProtobuf}
		if tok != nil && tok.Vocab != nil {
			opts.Tokens = tok.Vocab
			opts.EndTokens = EndTokens(tok.Vocab)
		}
		return tinker.New(tc, opts)
	}
	return policy.New(o)
}

// EndTokens are the end-of-sequence tokens of the model whose tokenizer
// is v, as text: those of Qwen's (<|im_end|>, <|endoftext|>, the
// instruct models' generation_config eos_token_id) that v has as one
// token. A Tinker server is sent them as stop strings.
func EndTokens(v roles.Vocab) []string {
	var out []string
	for _, t := range roles.QwenEndTokens {
		ids := v.AppendEncode(nil, t)
		if len(ids) != 1 {
			continue
		}
		if b, ok := v.TokenBytes(ids[0]); ok && string(b) == t {
			out = append(out, t)
		}
	}
	return out
}

// tinkerJudge builds judge.api tinker's judge: the judge model sampled
// through a Tinker server's asample, its chat template applied and its
// messages tokenized here with judge.tokenizer. A tokenizer or template
// that cannot be had gives a judge that fails with why (doctor reports
// it); the returned func releases the client's session.
func tinkerJudge(r *recipes.Recipe, o transport.Options, apiKey string, env map[string]string, load TokenizerLoader) (judge.Judge, func(), error) {
	if load == nil {
		load = loadTokenizerFile
	}
	chat, ok := roles.ChatFor(r.Judge.Model)
	if !ok {
		return judge.Unavailable{Server: o.BaseURL, Err: &roles.TokenizerError{
			What: fmt.Sprintf("judge.model %q: the program reproduces the chat template of the Qwen2.5 and Qwen3 families only, and a Tinker server takes token ids", r.Judge.Model),
			Fix:  "use a Qwen2.5 or Qwen3 judge with judge.api tinker, or an OpenAI-compatible judge (judge.api vllm or openai)"}}, nil, nil
	}
	path := r.Judge.Tokenizer
	var v roles.Vocab
	if path == recipes.TokenizerQwen25 || path == recipes.TokenizerQwen3 {
		bt, err := builtinTokenizer(path, chat)
		if err != nil {
			return nil, nil, err
		}
		v = bt.Vocab
	} else if path == recipes.TokenizerAuto {
		p, _, err := hfCacheTokenizer(r.Judge.Model, env)
		var te *roles.TokenizerError
		if errors.As(err, &te) {
			return judge.Unavailable{Server: o.BaseURL, Err: &roles.TokenizerError{What: "judge.tokenizer auto: " + te.What,
				Fix: fmt.Sprintf("download it (huggingface-cli download %s tokenizer.json) or set judge.tokenizer to the judge model's tokenizer.json", r.Judge.Model)}}, nil, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("judge.tokenizer auto: %w", err)
		}
		path = p
	}
	if v == nil {
		var err error
		if v, err = load(path); err != nil {
			return judge.Unavailable{Server: o.BaseURL, Err: fmt.Errorf("judge.tokenizer: %w", err)}, nil, nil
		}
	}
	tc, err := trainer.New(o, apiKey)
	if err != nil {
		return nil, nil, err
	}
	end := EndTokens(v)
	c, err := tinker.New(tc, tinker.Options{BaseModel: r.Judge.Model, Tokens: v, EndTokens: end, MaxInFlight: r.Judge.Concurrency,
		Protobuf: r.Policy.TinkerResults == recipes.TinkerResultsProtobuf})
	if err != nil {
		return nil, nil, err
	}
	render := func(msgs []judge.Message) string {
		pm := make([]policy.Message, len(msgs))
		for i, m := range msgs {
			pm[i] = policy.Message{Role: m.Role, Content: m.Content}
		}
		return chat(pm, true)
	}
	j, err := judge.NewTokenChat(c, r.Judge.Model, render, func(text string) []int { return v.AppendEncode(nil, text) }, end)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return j, c.Close, nil
}

// SimAgent is the simulated agent's behaviours of a recipe's sim.agent.
func SimAgent(a recipes.SimAgent) lm.Behaviour {
	return lm.Behaviour{InvalidRate: a.InvalidRate, RepeatRate: a.RepeatRate, RambleRate: a.RambleRate, ThinkCollapse: a.ThinkCollapse, CutStopRate: a.CutStopRate, SearchBias: a.SearchBias}
}

// httpOptions are the transport options of role at url under the recipe's
// http.* keys, reporting to m.
func httpOptions(r *recipes.Recipe, role, url string, m *metrics.Metrics) transport.Options {
	o := transport.DefaultOptions(role, url)
	h := r.HTTP
	o.Timeout = time.Duration(h.TimeoutSeconds * float64(time.Second))
	o.Retries = h.Retries
	o.RetryWaitMin = time.Duration(h.RetryWaitMinMS) * time.Millisecond
	o.RetryWaitMax = time.Duration(h.RetryWaitMaxMS) * time.Millisecond
	o.PoolSize = h.PoolSize
	m.Instrument(&o)
	return o
}

// MLflow is the client of the recipe's MLflow server
// (tracking.mlflow.tracking_uri) with the credentials MLflow's own
// variables in environ hold: MLFLOW_TRACKING_TOKEN, or
// MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD.
func MLflow(r *recipes.Recipe, environ []string, m *metrics.Metrics) (*mlflow.Client, error) {
	env := recipes.EnvMap(environ)
	mc, err := mlflow.New(httpOptions(r, "mlflow", r.Tracking.MLflow.TrackingURI, m), mlflow.Credentials{Token: env["MLFLOW_TRACKING_TOKEN"],
		Username: env["MLFLOW_TRACKING_USERNAME"], Password: env["MLFLOW_TRACKING_PASSWORD"]})
	if err != nil {
		return nil, fmt.Errorf("tracking.mlflow.tracking_uri: %w", err)
	}
	return mc, nil
}
