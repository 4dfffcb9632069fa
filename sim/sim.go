// Package sim is the embedded simulator: a simulated policy (vLLM
// protocol), judge (OpenAI chat protocol) and trainer (Tinker protocol)
// served over HTTP on loopback, so that the orchestrator's real clients drive
// the whole HindSearch loop on a laptop with no GPU. The simulated policy is
// a small stochastic search agent over real questions and real retrieval,
// with a learnable parameter vector that the simulated trainer updates by
// real gradient steps; it and the simulated judge's model are package
// sim/lm, which sim serves. The simulated trainer is package sim/trainer and
// the weight files it writes and the policy loads are package sim/weights;
// Start serves the trainer with the rest. Nothing it produces is a language
// model's output: every response carries the X-Hindsearch-Simulator header
// and the "hindsearch-simulator" fingerprint.
package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hindsearch/hindsearch/sim/lm"
	"github.com/hindsearch/hindsearch/sim/trainer"
	"github.com/hindsearch/hindsearch/sim/weights"
)

// Config selects and configures the simulated servers.
type Config struct {
	// BaseModel is the name the simulated policy and trainer serve.
	BaseModel string
	// JudgeModel is the simulated judge's model name.
	JudgeModel string
	// JudgeAPIKey, when set, is required as the judge's bearer token.
	JudgeAPIKey string
	// CheckpointsDir is where the simulated trainer writes sampler archives.
	CheckpointsDir string
	// TrainerArchive is the layout of the simulated trainer's archives
	// (trainer.Server.Archive; "": weights.ArchiveJAX).
	TrainerArchive weights.ArchiveLayout
	// TrainerBackend is the SkyRL training backend the simulated trainer
	// behaves like (trainer.Server.Backend; "": trainer.BackendJAX).
	TrainerBackend trainer.Backend
	// TrainerNoDeleteRoute plays a SkyRL without the DELETE checkpoint
	// route (trainer.Server.NoDeleteRoute; sim.trainer.delete_route false).
	TrainerNoDeleteRoute bool
	// Agent is the simulated agent's abnormal behaviours (sim.agent).
	Agent lm.Behaviour
	// PrefillNoise is the sd of the simulated policy's prefill-route
	// logprob noise (PolicyServer.SetPrefillNoise; 0: none).
	PrefillNoise float64
	// Corpus holds the wiki-18 contents strings (the judge reads them).
	Corpus []string
	// Answers are the gold answers of the questions the policy may be
	// asked (question text -> gold answers), for its reading skill
	// (lm.Model.SetAnswers); nil: it recognises no answer.
	Answers map[string][]string
	// Epsilon is the policy's uniform floor (default 1e-6).
	Epsilon float64
	// PolicyReplicas is the number of policy servers to start (0: none).
	PolicyReplicas int
	// Judge and Trainer start those roles.
	Judge, Trainer bool
	// Latency is the simulated servers' timing (zero: instant). The
	// retriever is not started here: wrap it with DelayRetriever.
	Latency Latency
	// Faults injects faults into each role (zero: none).
	Faults RoleFaults
	// GenerationConfig is the generation config the simulated policy and
	// judge models ship (nil: lm.QwenInstructGenerationConfig).
	GenerationConfig *lm.GenerationConfig
}

// Servers are running simulated servers on loopback.
type Servers struct {
	// PolicyURLs, JudgeURL and TrainerURL are the base URLs of the
	// started servers ("" for roles not started).
	PolicyURLs []string
	JudgeURL   string
	TrainerURL string
	// Model is the shared simulated policy model.
	Model *lm.Model
	// Policies, Judge and Trainer are the server objects, for inspection.
	Policies []*PolicyServer
	JudgeSrv *JudgeServer
	Trainer  *trainer.Server

	https []*http.Server
	// fresh are the servers' connections that have not sent a request
	// yet, closed first by Close.
	fresh  freshConns
	faults []*Faulty

	cfg       Config
	mu        sync.Mutex
	policySrv []*http.Server // each replica's server, for KillPolicy
}

// Start builds the model and starts the selected servers on 127.0.0.1.
func Start(cfg Config) (*Servers, error) {
	if !(cfg.PrefillNoise >= 0) {
		return nil, fmt.Errorf("sim: prefill noise %v: want a number >= 0", cfg.PrefillNoise)
	}
	if cfg.Epsilon <= 0 {
		cfg.Epsilon = 1e-6
	}
	if cfg.TrainerArchive != "" && !slices.Contains(weights.ArchiveLayouts, cfg.TrainerArchive) {
		return nil, fmt.Errorf("sim: trainer archive layout %q: want %s or %s", cfg.TrainerArchive, weights.ArchiveJAX, weights.ArchiveFSDP)
	}
	if cfg.TrainerBackend != "" && !slices.Contains(trainer.Backends, cfg.TrainerBackend) {
		return nil, fmt.Errorf("sim: trainer backend %q: want %s or %s", cfg.TrainerBackend, trainer.BackendJAX, trainer.BackendFSDP)
	}
	tk, err := lm.NewTokenizer()
	if err != nil {
		return nil, err
	}
	s := &Servers{Model: lm.NewModel(tk, cfg.Epsilon)}
	s.Model.SetAnswers(cfg.Answers)
	s.Model.SetBehaviour(cfg.Agent)
	serve := func(h http.Handler) (string, error) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("sim listen: %w", err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ConnState: s.fresh.track}
		s.https = append(s.https, srv)
		go func() { _ = srv.Serve(l) }()
		return "http://" + l.Addr().String(), nil
	}
	s.cfg = cfg
	gen := lm.QwenInstructGenerationConfig()
	if cfg.GenerationConfig != nil {
		gen = *cfg.GenerationConfig
	}
	for i := 0; i < cfg.PolicyReplicas; i++ {
		p := NewPolicyServer(s.Model, cfg.BaseModel)
		p.SetLatency(cfg.Latency)
		p.SetGenerationConfig(gen)
		p.SetPrefillNoise(cfg.PrefillNoise)
		s.Policies = append(s.Policies, p)
		u, err := serve(s.faulty(p.Handler(), cfg.Faults.Policy, uint64(i)))
		if err != nil {
			s.Close()
			return nil, err
		}
		s.PolicyURLs = append(s.PolicyURLs, u)
		s.policySrv = append(s.policySrv, s.https[len(s.https)-1])
	}
	if cfg.Judge {
		s.JudgeSrv = NewJudgeServer(cfg.JudgeModel, cfg.JudgeAPIKey, cfg.Corpus)
		s.JudgeSrv.Delay = cfg.Latency.Judge
		s.JudgeSrv.SetGenerationConfig(gen)
		s.JudgeSrv.SetTokenizer(tk)
		u, err := serve(s.faulty(s.JudgeSrv.Handler(), cfg.Faults.Judge, 0))
		if err != nil {
			s.Close()
			return nil, err
		}
		s.JudgeURL = u
	}
	if cfg.Trainer {
		s.Trainer = trainer.NewServer(s.Model, cfg.BaseModel, cfg.CheckpointsDir)
		s.Trainer.PollWait = 500 * time.Millisecond
		s.Trainer.DatumDelay = cfg.Latency.TrainerPerDatum
		s.Trainer.StepDelay = cfg.Latency.TrainerStep
		s.Trainer.Archive = cfg.TrainerArchive
		s.Trainer.Backend = cfg.TrainerBackend
		s.Trainer.NoDeleteRoute = cfg.TrainerNoDeleteRoute
		s.Trainer.PrefillNoise = cfg.PrefillNoise
		u, err := serve(s.faulty(s.Trainer.Handler(), cfg.Faults.Trainer, 0))
		if err != nil {
			s.Close()
			return nil, err
		}
		s.TrainerURL = u
	}
	return s, nil
}

// Close stops every server and waits for their handlers; requests still
// waiting in a policy engine or on a trainer future are answered 503.
func (s *Servers) Close() {
	for _, f := range s.faults {
		f.Close()
	}
	// A client's spare connection that never carried a request counts as
	// active for Shutdown until it is 5 s old (net/http's rule for new
	// connections): close those first, and give the rest a short grace (no
	// request is meant to be in flight when the servers close).
	s.fresh.closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if s.Trainer != nil {
		s.Trainer.Close()
	}
	for _, p := range s.Policies {
		p.Close()
	}
	for _, h := range s.https {
		if err := h.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = h.Close()
		}
	}
}

// faulty wraps h with f's fault injection (replica offsets the seed).
func (s *Servers) faulty(h http.Handler, f Faults, replica uint64) http.Handler {
	if f.Rate <= 0 {
		return h
	}
	f.Seed += 1000 * replica
	x := NewFaulty(h, f)
	s.faults = append(s.faults, x)
	return x
}

// FaultsInjected is the number of faults the servers injected so far.
func (s *Servers) FaultsInjected() int64 {
	n := int64(0)
	for _, f := range s.faults {
		n += f.Injected()
	}
	return n
}

// KillPolicy stops policy replica i at once, as a crashed server: open
// connections are dropped and new ones refused.
func (s *Servers) KillPolicy(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.policySrv[i].Close()
	s.Policies[i].Close()
}

// RestartPolicy starts policy replica i again on its address, as a fresh
// server: it serves the base model only, every adapter is gone.
func (s *Servers) RestartPolicy(i int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	addr := strings.TrimPrefix(s.PolicyURLs[i], "http://")
	var l net.Listener
	var err error
	for try := 0; try < 50; try++ { // the old socket may linger a moment
		if l, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("sim restart %s: %w", addr, err)
	}
	p := NewPolicyServer(s.Model, s.cfg.BaseModel)
	p.SetLatency(s.cfg.Latency)
	if s.cfg.GenerationConfig != nil {
		p.SetGenerationConfig(*s.cfg.GenerationConfig)
	}
	p.SetPrefillNoise(s.cfg.PrefillNoise)
	s.Policies[i] = p
	srv := &http.Server{Handler: s.faulty(p.Handler(), s.cfg.Faults.Policy, uint64(i)), ReadHeaderTimeout: 10 * time.Second,
		ConnState: s.fresh.track}
	s.policySrv[i] = srv
	s.https = append(s.https, srv)
	go func() { _ = srv.Serve(l) }()
	return nil
}
