package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hindsearch/hindsearch/clients/retriever/bm25"
	"github.com/hindsearch/hindsearch/orchestrator/dataset"
	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/sim"
	"github.com/hindsearch/hindsearch/sim/lm"
	simtrainer "github.com/hindsearch/hindsearch/sim/trainer"
	"github.com/hindsearch/hindsearch/sim/weights"
)

// simAddrs is the line serve sim prints: the base URL of every server it
// started ("" or [] for roles the recipe does not mark embedded).
type simAddrs struct {
	Policy []string `json:"policy"`
	// Reference are the simulated reference servers (one per "embedded"
	// entry of reference.urls): the simulated base model, never synced.
	Reference []string `json:"reference,omitempty"`
	Judge     string   `json:"judge"`
	Trainer   string   `json:"trainer"`
	Retriever string   `json:"retriever"`
	// CheckpointsDir is where the simulated trainer writes sampler
	// archives: a run that uses this trainer over HTTP needs it as
	// trainer.checkpoints_dir.
	CheckpointsDir string `json:"checkpoints_dir,omitempty"`
	Simulated      bool   `json:"simulated"`
}

func newServeSimCmd(e *env) *cobra.Command {
	var rf recipeFlags
	var faults, requestLog string
	jsonOut := true
	cmd := &cobra.Command{
		Use:   "sim RECIPE",
		Short: "Serve a recipe's embedded SIMULATED policy, judge and trainer (and its BM25 retriever) on loopback ports",
		Long: `Start, on 127.0.0.1 ephemeral ports, the servers that RECIPE marks "embedded":
one simulated policy replica per "embedded" entry of policy.urls (and of
reference.urls: the base model, for trainer.kl_coef), the simulated judge, the simulated trainer, and the real BM25 retriever over retriever.corpus
(indexed into retriever.index_dir, default the user cache directory), each with
the recipe's sim.* latencies. The policy, judge and trainer are a SIMULATOR, not
language models.

Prints one line of JSON to stdout:
  {"policy": [URL...], "reference": [URL...], "judge": URL, "trainer": URL, "retriever": URL,
   "checkpoints_dir": DIR, "simulated": true}
("" or [] for roles not started), then serves until interrupted (SIGINT,
SIGTERM) or, when stdin is a pipe, until the pipe closes.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if faults != "" {
				sets, err := faultSets(faults)
				if err != nil {
					return err
				}
				rf.sets = append(sets, rf.sets...)
			}
			r, err := rf.load(e, args[0])
			if err != nil {
				return err
			}
			return serveSim(cmd.Context(), e, r, cmd.InOrStdin(), jsonOut, requestLog)
		},
	}
	rf.register(cmd.Flags())
	cmd.Flags().StringVar(&faults, "faults", "", "inject faults into every simulated role: KIND[,KIND...]@RATE, kinds among "+strings.Join(sim.FaultKinds, ", ")+" (sim.faults.* keys set them per role)")
	cmd.Flags().StringVar(&requestLog, "request-log", "", "write DIR/policy-N.jsonl: one line per completion request policy replica N served ({\"session\", \"model\", \"prompt_tokens\"}; session is the X-Session-ID header), e.g. to see a router keep each trajectory on one replica")
	cmd.Flags().BoolVar(&jsonOut, "json", true, "print the addresses as one JSON line (--json=false: one \"role URL\" line per server)")
	return cmd
}

// serveSim starts the recipe's embedded servers, prints their addresses and
// serves until ctx is done or stdin (when watched) closes.
func serveSim(ctx context.Context, e *env, r *recipes.Recipe, stdin io.Reader, jsonOut bool, requestLog string) error {
	replicas := recipes.EmbeddedCount(r.Policy.URLs)
	judge := r.Judge.URL == recipes.Embedded
	trainer := r.Trainer.URL == recipes.Embedded
	// An embedded Tinker policy is the simulated trainer's sampling
	// routes: no policy server of its own.
	tinkerPolicy := r.Policy.Server == recipes.ServerTinker && replicas > 0
	if tinkerPolicy {
		replicas = 0
	}
	refs := recipes.EmbeddedCount(r.Reference.URLs)
	retr := r.Retriever.URL == recipes.Embedded
	if replicas == 0 && refs == 0 && !judge && !trainer && !retr {
		return errors.New("serve sim: the recipe marks no role \"embedded\"")
	}
	if trainer && r.Trainer.BaseModel != r.Policy.Model {
		return fmt.Errorf("trainer.base_model %q must equal policy.model %q with the embedded simulator", r.Trainer.BaseModel, r.Policy.Model)
	}
	addrs := simAddrs{Policy: []string{}, Simulated: true}
	lat := sim.LatencyFromRecipe(r.Sim)

	var servers *sim.Servers
	if replicas > 0 || refs > 0 || judge || trainer {
		corpus, err := dataset.LoadCorpus(r.Retriever.Corpus)
		if err != nil {
			return fmt.Errorf("retriever.corpus: %w", err)
		}
		ckpt := r.Trainer.CheckpointsDir
		if trainer && ckpt == "" {
			ckpt = filepath.Join(r.Output.Dir, "checkpoints")
		}
		answers, err := dataset.Answers(r)
		if err != nil {
			return err
		}
		gen := lm.GenerationConfigFromRecipe(r.Sim.GenerationConfig)
		servers, err = sim.Start(sim.Config{BaseModel: r.Policy.Model, JudgeModel: r.Judge.Model,
			JudgeAPIKey: envValue(e.environ, r.Judge.APIKeyEnv), CheckpointsDir: ckpt, TrainerArchive: weights.ArchiveLayout(r.Sim.Trainer.Archive), TrainerBackend: simtrainer.Backend(r.Sim.Trainer.Backend), TrainerNoDeleteRoute: !r.Sim.Trainer.DeleteRoute, PrefillNoise: r.Sim.Policy.PrefillNoise, Agent: setup.SimAgent(r.Sim.Agent), Corpus: corpus, Answers: answers,
			Epsilon: r.Sim.Epsilon, PolicyReplicas: replicas + refs, Judge: judge, Trainer: trainer,
			Latency: lat, Faults: sim.FaultsFromRecipe(r.Sim.Faults, r.Seed), GenerationConfig: &gen})
		if err != nil {
			return err
		}
		defer servers.Close()
		if requestLog != "" {
			if err := os.MkdirAll(requestLog, 0o755); err != nil {
				return fmt.Errorf("--request-log: %w", err)
			}
			for i, p := range servers.Policies {
				f, err := os.Create(filepath.Join(requestLog, fmt.Sprintf("policy-%d.jsonl", i)))
				if err != nil {
					return fmt.Errorf("--request-log: %w", err)
				}
				defer f.Close()
				p.SetRequestLog(f)
			}
		}
		addrs.Policy = append(addrs.Policy, servers.PolicyURLs[:replicas]...)
		addrs.Reference = append(addrs.Reference, servers.PolicyURLs[replicas:]...)
		if tinkerPolicy {
			addrs.Policy = []string{servers.TrainerURL}
		}
		addrs.Judge, addrs.Trainer = servers.JudgeURL, servers.TrainerURL
		if trainer {
			addrs.CheckpointsDir = ckpt
		}
	}

	var delayed *sim.DelayedRetriever
	if retr {
		dir := r.Retriever.IndexDir
		if dir == "" {
			c, err := os.UserCacheDir()
			if err != nil {
				c = os.TempDir()
			}
			dir = filepath.Join(c, "hindsearch", "bm25")
		}
		prog, endProgress, _ := setup.BM25Progress(nil, e.stderr, r.Retriever.Corpus, dir)
		ix, err := bm25.OpenWith(ctx, r.Retriever.Corpus, dir, bm25.Params{K1: r.Retriever.BM25K1, B: r.Retriever.BM25B}, prog)
		endProgress()
		if err != nil {
			return fmt.Errorf("embedded retriever: %w", err)
		}
		defer ix.Close()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("embedded retriever: %w", err)
		}
		style, err := bm25.ParseStyle(r.Sim.RetrieverStyle)
		if err != nil {
			return fmt.Errorf("sim.retriever_style: %w", err)
		}
		delayed = sim.NewDelayedRetriever(ix.Handler(style), lat.RetrieverBatch, lat.RetrieverQuery)
		var h http.Handler = delayed
		if f := sim.FaultsFromRecipe(r.Sim.Faults, r.Seed).Retriever; f.Rate > 0 {
			fy := sim.NewFaulty(delayed, f)
			defer fy.Close()
			h = fy
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(l) }()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if srv.Shutdown(sctx) != nil {
				_ = srv.Close()
			}
		}()
		addrs.Retriever = "http://" + l.Addr().String()
	}

	fmt.Fprintf(e.stderr, "serving SIMULATED servers (hindsearch simulator, not language models): %d policy replica(s), %d reference(s), judge %t, trainer %t; real BM25 retriever %t\n",
		replicas, refs, judge, trainer, retr)
	if jsonOut {
		line, err := json.Marshal(addrs)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(e.stdout, "%s\n", line); err != nil {
			return err
		}
	} else {
		var b strings.Builder
		for _, u := range addrs.Policy {
			fmt.Fprintf(&b, "policy %s\n", u)
		}
		for _, u := range addrs.Reference {
			fmt.Fprintf(&b, "reference %s\n", u)
		}
		for _, kv := range [][2]string{{"judge", addrs.Judge}, {"trainer", addrs.Trainer}, {"retriever", addrs.Retriever}} {
			if kv[1] != "" {
				fmt.Fprintf(&b, "%s %s\n", kv[0], kv[1])
			}
		}
		if _, err := io.WriteString(e.stdout, b.String()); err != nil {
			return err
		}
	}

	stdinClosed := make(chan struct{})
	if watchStdin(stdin) {
		// The reader stays blocked until stdin closes; for os.Stdin the
		// process exits first.
		go func() {
			_, _ = io.Copy(io.Discard, stdin)
			close(stdinClosed)
		}()
	}
	select {
	case <-ctx.Done():
	case <-stdinClosed:
	}
	if servers != nil {
		for i, p := range servers.Policies {
			st := p.Stats()
			fmt.Fprintf(e.stderr, "simulated policy %d: %d requests, %d decode steps, %d tokens, busy %.3fs\n",
				i, st.Requests, st.DecodeSteps, st.Tokens, st.BusySeconds)
		}
	}
	if delayed != nil {
		calls, queries := delayed.Stats()
		fmt.Fprintf(e.stderr, "retriever: %d calls, %d queries\n", calls, queries)
	}
	return nil
}

// watchStdin reports whether serve sim should stop when stdin closes: when
// it is a pipe or socket (a parent process holds the other end), or a
// reader that is not a file (tests); not for a terminal or /dev/null.
func watchStdin(in io.Reader) bool {
	if in == nil {
		return false
	}
	f, ok := in.(*os.File)
	if !ok {
		return true
	}
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	return fi.Mode()&(os.ModeNamedPipe|os.ModeSocket) != 0
}

// envValue returns the value of the environment variable name in environ
// (the last one set, as orchestrator.Connect reads it; "" for no name or no
// such variable).
func envValue(environ []string, name string) string {
	val := ""
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && name != "" && k == name {
			val = v
		}
	}
	return val
}

// faultSets turns --faults KIND[,KIND...]@RATE into sim.faults overrides
// for every role.
func faultSets(spec string) ([]string, error) {
	kinds, rate, ok := strings.Cut(spec, "@")
	if !ok || kinds == "" || rate == "" {
		return nil, fmt.Errorf("--faults %q: want KIND[,KIND...]@RATE, e.g. 500,reset@0.05", spec)
	}
	var sets []string
	for _, role := range []string{"policy", "judge", "retriever", "trainer"} {
		sets = append(sets, "sim.faults."+role+".rate="+rate, "sim.faults."+role+".kinds="+kinds)
	}
	return sets, nil
}
