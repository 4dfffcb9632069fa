package orchestrator

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/orchestrator/metrics"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/recipes"
)

// Connect resolves policy.tokenizer: the simulator's own tokenizer for
// embedded policies (no file needed), a file through the loader it is
// given, auto through the Hugging Face cache; a missing one is reported in
// Deps.TokenizerErr and a run refuses to start with it.
func TestConnectTokenizer(t *testing.T) {
	ctx := context.Background()
	r := testRecipe(t, "")
	deps, emb, err := setup.Connect(ctx, r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	emb.Close()
	if deps.TokenizerErr != nil || deps.Tokenizer == nil || deps.Tokenizer.Vocab != emb.Sim().Model.Tokenizer() {
		t.Fatalf("embedded: tokenizer %+v, err %v", deps.Tokenizer, deps.TokenizerErr)
	}

	// Remote servers (nothing embedded: no simulator in this process).
	remote := func(more ...string) []string {
		return append([]string{"policy.urls=http://127.0.0.1:9", "judge.url=http://127.0.0.1:9", "retriever.url=http://127.0.0.1:9",
			"trainer.url=http://127.0.0.1:9", "trainer.checkpoints_dir=" + t.TempDir()}, more...)
	}
	// A file is loaded with the loader.
	file := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(file, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	stub := &stubVocab{}
	var loaded []string
	loader := setup.WithTokenizerLoader(func(p string) (roles.Vocab, error) { loaded = append(loaded, p); return stub, nil })
	r = testRecipe(t, "", remote("policy.tokenizer="+file)...)
	deps, emb, err = setup.Connect(ctx, r, nil, nil, loader)
	if err != nil {
		t.Fatal(err)
	}
	emb.Close()
	if deps.TokenizerErr != nil || deps.Tokenizer.Vocab != stub || !slices.Equal(loaded, []string{file}) || deps.Tokenizer.Source != file {
		t.Fatalf("file: %+v %v, loaded %q", deps.Tokenizer, deps.TokenizerErr, loaded)
	}
	if got := deps.Tokenizer.Chat([]policy.Message{{Role: "user", Content: "Q?"}}, true); got != "<|im_start|>system\n"+roles.Qwen25SystemPrompt+"<|im_end|>\n<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n" {
		t.Errorf("a tokenizer file's chat template: %q", got)
	}

	// auto with a remote policy and an empty cache: no tokenizer, and the
	// run says why before it touches the run directory.
	home := t.TempDir()
	r = testRecipe(t, "", remote()...)
	deps, emb, err = setup.Connect(ctx, r, []string{"HOME=" + home}, nil, loader)
	if err != nil {
		t.Fatal(err)
	}
	emb.Close()
	if deps.Tokenizer != nil || deps.TokenizerErr == nil || !strings.HasPrefix(deps.TokenizerErr.Error(), "policy.tokenizer auto: no sim/base in the Hugging Face cache") {
		t.Fatalf("auto, empty cache: %+v %v", deps.Tokenizer, deps.TokenizerErr)
	}
	if _, err := (&Runner{Recipe: r, Deps: deps}).Run(ctx); err == nil || err.Error() != deps.TokenizerErr.Error() {
		t.Errorf("run without a tokenizer: %v", err)
	}
	if _, err := os.Stat(r.Output.Dir); !os.IsNotExist(err) {
		t.Errorf("the run directory was made: %v", err)
	}
	// auto finds it in the cache and says so.
	tj := filepath.Join(home, ".cache/huggingface/hub/models--sim--base/snapshots/r1/tokenizer.json")
	if err := os.MkdirAll(filepath.Dir(tj), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tj, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	loaded = nil
	deps, emb, err = setup.Connect(ctx, r, []string{"HOME=" + home}, &log, loader)
	if err != nil {
		t.Fatal(err)
	}
	emb.Close()
	if deps.TokenizerErr != nil || !slices.Equal(loaded, []string{tj}) || !strings.Contains(log.String(), "policy.tokenizer auto: "+tj+" (the only snapshot") {
		t.Errorf("auto: %v, loaded %q, log %q", deps.TokenizerErr, loaded, log.String())
	}
	// Without a loader given, a file is read by the Go tokenizer: a file
	// it cannot read is an error naming the key and the file.
	r = testRecipe(t, "", remote("policy.tokenizer="+file)...)
	deps, emb, err = setup.Connect(ctx, r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	emb.Close()
	if deps.TokenizerErr == nil || !strings.Contains(deps.TokenizerErr.Error(), "policy.tokenizer") || !strings.Contains(deps.TokenizerErr.Error(), file) {
		t.Errorf("an unreadable tokenizer file: %v", deps.TokenizerErr)
	}
	// A real tokenizer.json is loaded by it.
	qwen := filepath.Join("..", "clients", "policy", "tokenizer", "qwen2.5", "tokenizer.json.gz")
	r = testRecipe(t, "", remote("policy.tokenizer="+mustAbs(t, qwen))...)
	deps, emb, err = setup.Connect(ctx, r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	emb.Close()
	if deps.TokenizerErr != nil || deps.Tokenizer.Vocab.AppendEncode(nil, "Hello world")[1] != 1879 {
		t.Errorf("Qwen2.5's tokenizer.json: %+v %v", deps.Tokenizer, deps.TokenizerErr)
	}
	// sim: the simulator's tokenizer for servers another process started,
	// built from the recipe as that process builds it.
	r = testRecipe(t, "", remote("policy.tokenizer=sim")...)
	deps, emb, err = setup.Connect(ctx, r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if emb.Sim() != nil {
		t.Fatal("a simulator was started")
	}
	emb.Close()
	r2 := testRecipe(t, "")
	ref, emb2, err := setup.Connect(ctx, r2, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	emb2.Close()
	probe := format.InfoBlock([]string{"\"Paris\"\nParis is the capital of France."}) + format.InvalidActionText
	if deps.TokenizerErr != nil || !slices.Equal(deps.Tokenizer.Vocab.AppendEncode(nil, probe), ref.Tokenizer.Vocab.AppendEncode(nil, probe)) {
		t.Errorf("sim: %v", deps.TokenizerErr)
	}
}

// policy.tokenize local builds the same batches as server mode against a
// server with the same tokenizer (the simulator): the same step digests,
// evaluations and kept trajectories, with no POST /tokenize at all; the
// direct strategy's prompts match too.
func TestLocalTokenizationGivesTheServersBatches(t *testing.T) {
	type outcome struct {
		digests []string
		kept    string
		evals   []float64
		direct  []float64
		tokens  float64
	}
	run := func(mode string) outcome {
		r := testRecipe(t, "", "policy.tokenize="+mode)
		m := metrics.New()
		ctx := context.Background()
		deps, emb, err := setup.Connect(ctx, r, nil, nil, setup.WithMetrics(m))
		if err != nil {
			t.Fatal(err)
		}
		defer emb.Close()
		var out bytes.Buffer
		res, err := (&Runner{Recipe: r, Deps: deps, Out: &out, Metrics: m}).Run(ctx)
		if err != nil {
			t.Fatalf("%s: %v\n%s", mode, err, out.String())
		}
		var o outcome
		o.digests = stepDigests(res)
		kept, err := os.ReadFile(filepath.Join(r.Output.Dir, "trajectories", "step-0002.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		o.kept = string(kept)
		for _, e := range res.Evals {
			o.evals = append(o.evals, e.EM, e.F1)
		}
		recs, err := Evaluate(ctx, r, deps, EvalOptions{Strategy: format.StrategyDirect, Step: 9})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range recs {
			o.direct = append(o.direct, e.EM, e.F1, float64(e.N))
		}
		o.tokens = sum(scrape(t, m), "hindsearch_requests_total", `role="policy"`, `path="/tokenize"`)
		return o
	}
	server, local := run(recipes.TokenizeServer), run(recipes.TokenizeLocal)
	if len(server.digests) != 2 || !slices.Equal(server.digests, local.digests) {
		t.Errorf("step digests: server %v, local %v", server.digests, local.digests)
	}
	if server.kept != local.kept || server.kept == "" {
		t.Errorf("kept trajectories differ:\nserver %.300s\nlocal  %.300s", server.kept, local.kept)
	}
	if !slices.Equal(server.evals, local.evals) || !slices.Equal(server.direct, local.direct) || len(server.direct) == 0 {
		t.Errorf("evaluations: server %v %v, local %v %v", server.evals, server.direct, local.evals, local.direct)
	}
	if server.tokens == 0 || local.tokens != 0 {
		t.Errorf("POST /tokenize requests: server mode %v, local mode %v (want none)", server.tokens, local.tokens)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// stubVocab is a Vocab that a test loader hands out, known by identity.
type stubVocab struct{}

func (*stubVocab) TokenBytes(int) ([]byte, bool)          { return nil, false }
func (*stubVocab) AppendEncode(dst []int, _ string) []int { return dst }
