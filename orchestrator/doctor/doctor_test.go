package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/judge"
	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/clients/retriever"
	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/orchestrator/internal/testkit"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/recipes"
)

// row is what the tests compare of a check.
type row struct {
	role, name string
	status     CheckStatus
}

func rows(rep *Report) []row {
	var out []row
	for _, c := range rep.Checks {
		out = append(out, row{c.Role, c.Name, c.Status})
	}
	return out
}

// The embedded default is all green, with a row per check, and doctor
// leaves no trace in the sync directory.
func TestDoctorEmbeddedDefault(t *testing.T) {
	r := testRecipe(t, "", "policy.urls=embedded,embedded")
	deps, emb, err := setup.Connect(context.Background(), r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	rep := Run(context.Background(), r, deps, Options{})
	want := []row{
		{"policy", "health", CheckOK}, {"policy", "models", CheckOK}, {"policy", "lora routes", CheckOK},
		{"policy", "chat template", CheckOK}, {"policy", "logprobs", CheckOK}, {"policy", prefillRow, CheckOK}, {"policy", "tokenizer", CheckOK}, {"policy", "local tokenizer", CheckOK},
		{"policy", "health", CheckOK}, {"policy", "models", CheckOK}, {"policy", "lora routes", CheckOK},
		{"policy", "chat template", CheckOK}, {"policy", "logprobs", CheckOK}, {"policy", prefillRow, CheckOK}, {"policy", "tokenizer", CheckOK}, {"policy", "local tokenizer", CheckOK},
		{"judge", "chat", CheckOK},
		{"retriever", "retrieve", CheckOK},
		{"trainer", "healthz", CheckOK}, {"trainer", "base model", CheckOK}, {"trainer", "delete route", CheckOK},
		{"trainer", "weights", CheckOK}, {"trainer", "optimizer", CheckOK}, {"trainer", "loss aggregation", CheckOK}, {"trainer", "checkpoints dir", CheckOK},
		{"teacher", "hinted contexts", CheckOK},
		{"sync", "sync dir", CheckOK}, {"sync", "policy access", CheckOK},
	}
	if got := rows(rep); !slices.Equal(got, want) {
		t.Fatalf("rows:\n%v\nwant\n%v\n%s", got, want, report(t, rep))
	}
	if rep.Checks[0].Server == rep.Checks[8].Server {
		t.Error("both replicas' rows name the same server")
	}
	if d := rep.Checks[14].Detail; !strings.Contains(d, "identical to "+rep.Checks[0].Server) {
		t.Errorf("second replica's tokenizer row: %q", d)
	}
	if d := rep.Checks[15].Detail; !strings.Contains(d, "7 probe texts") || !strings.Contains(d, "the simulator's own tokenizer") {
		t.Errorf("second replica's local tokenizer row: %q", d)
	}
	out := report(t, rep)
	for _, w := range []string{"| role", "| server", "| check", "| status", "| detail", "all 28 checks passed",
		"SIMULATED: policy, judge, trainer served by the embedded hindsearch simulator"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "FAIL") || strings.Contains(out, "fix:") {
		t.Errorf("a green report shows a failure:\n%s", out)
	}
	if _, err := os.Stat(r.Sync.Dir); !os.IsNotExist(err) {
		t.Errorf("doctor left %s behind (%v)", r.Sync.Dir, err)
	}
}

// report renders rep.
func report(t *testing.T, rep *Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := rep.Write(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// stack is a recording fake of every role on one loopback server (the
// policy routes of one vLLM replica, a judge, a retriever and a Tinker
// trainer), healthy unless told otherwise.
type stack struct {
	*httptest.Server

	// models are listed by GET /v1/models.
	models []string
	// tokenShift is added to every token id (a different tokenizer);
	// modelShift adds more for one model name.
	tokenShift int
	modelShift map[string]int
	// noLoRA answers the LoRA routes 404 {"detail":"Not Found"}.
	noLoRA bool
	// sglang serves /update_weights_from_disk (refusing a missing path
	// with 400); else the route is missing.
	sglang bool
	// noChatTemplate refuses /tokenize with messages (400).
	noChatTemplate bool
	// textTokens answers completions with token strings, not
	// "token_id:<id>" (return_tokens_as_token_ids unsupported).
	textTokens bool
	// judgeKey, when set, is the bearer key the judge requires.
	judgeKey string
	// retrieveAnswer, when set, is the raw /retrieve answer.
	retrieveAnswer string
	// caps are the trainer's supported models.
	caps []string
	// trainerKey, when set, is the X-API-Key the trainer requires.
	trainerKey string

	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	// auth is the Authorization header, key the X-API-Key header.
	method, path, auth, key string
	body                    map[string]any
}

func newStack(t *testing.T, model string) *stack {
	s := &stack{models: []string{model}, caps: []string{model}, modelShift: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *stack) requests(path string) []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []recorded
	for _, r := range s.reqs {
		if r.path == path {
			out = append(out, r)
		}
	}
	return out
}

func (s *stack) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	s.mu.Lock()
	s.reqs = append(s.reqs, recorded{r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("X-API-Key"), body})
	s.mu.Unlock()
	notFound := func() { testkit.WriteJSON(w, http.StatusNotFound, map[string]any{"detail": "Not Found"}) }
	if strings.HasPrefix(r.URL.Path, "/api/v1/") && s.trainerKey != "" && r.Header.Get("X-API-Key") != s.trainerKey {
		testkit.WriteJSON(w, http.StatusUnauthorized, map[string]any{"detail": "invalid API key"})
		return
	}
	switch r.Method + " " + r.URL.Path {
	case "GET /health":
		w.WriteHeader(http.StatusOK)
	case "GET /v1/models":
		var data []map[string]any
		for _, m := range s.models {
			data = append(data, map[string]any{"id": m, "object": "model"})
		}
		testkit.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
	case "POST /v1/unload_lora_adapter", "POST /v1/load_lora_adapter":
		if s.noLoRA {
			notFound()
			return
		}
		testkit.WriteJSON(w, http.StatusNotFound, map[string]any{"object": "error", "message": fmt.Sprintf("The lora adapter '%v' cannot be found.", body["lora_name"]), "type": "NotFoundError", "code": 404})
	case "POST /update_weights_from_disk":
		if !s.sglang {
			notFound()
			return
		}
		testkit.WriteJSON(w, http.StatusBadRequest, map[string]any{"success": false, "message": fmt.Sprintf("Failed to get weights iterator: %v (no such file or directory).", body["model_path"]), "num_paused_requests": 0})
	case "POST /tokenize":
		model, _ := body["model"].(string)
		if !slices.Contains(s.models, model) {
			testkit.WriteJSON(w, http.StatusNotFound, map[string]any{"object": "error", "message": fmt.Sprintf("The model `%s` does not exist.", model), "code": 404})
			return
		}
		var text string
		if msgs, ok := body["messages"].([]any); ok {
			if s.noChatTemplate {
				testkit.WriteJSON(w, http.StatusBadRequest, map[string]any{"object": "error", "message": "As of transformers v4.44, default chat template is no longer allowed, so you must provide a chat template if the tokenizer does not define one.", "code": 400})
				return
			}
			for _, m := range msgs {
				mm := m.(map[string]any)
				text += fmt.Sprintf("<|%v|>%v<|end|>", mm["role"], mm["content"])
			}
			if body["add_generation_prompt"] == true {
				text += "<|assistant|>"
			}
		} else {
			text, _ = body["prompt"].(string)
		}
		var ids []int
		for _, b := range []byte(text) {
			ids = append(ids, int(b)+s.tokenShift+s.modelShift[model])
		}
		testkit.WriteJSON(w, http.StatusOK, map[string]any{"count": len(ids), "max_model_len": 4096, "tokens": ids})
	case "POST /v1/completions":
		prompt, _ := body["prompt"].([]any)
		if _, ok := body["prompt_logprobs"]; ok {
			pl := []any{nil}
			for _, id := range prompt[1:] {
				pl = append(pl, map[string]any{fmt.Sprint(id): map[string]any{"logprob": -1.5, "rank": 1, "decoded_token": "x"}})
			}
			testkit.WriteJSON(w, http.StatusOK, map[string]any{"choices": []any{map[string]any{"text": "x", "prompt_logprobs": pl}}})
			return
		}
		tok := "token_id:42"
		if s.textTokens {
			tok = "x"
		}
		testkit.WriteJSON(w, http.StatusOK, map[string]any{"choices": []any{map[string]any{"text": "x", "finish_reason": "length", "stop_reason": nil,
			"logprobs": map[string]any{"tokens": []string{tok}, "token_logprobs": []float64{-0.25}, "text_offset": []int{0}}}}})
	case "POST /v1/chat/completions":
		if s.judgeKey != "" && r.Header.Get("Authorization") != "Bearer "+s.judgeKey {
			testkit.WriteJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]any{"message": "Incorrect API key provided", "type": "invalid_request_error"}})
			return
		}
		testkit.WriteJSON(w, http.StatusOK, map[string]any{"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "ok"}, "finish_reason": "stop"}}})
	case "POST /retrieve":
		if s.retrieveAnswer != "" {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, s.retrieveAnswer)
			return
		}
		qs, _ := body["queries"].([]any)
		k, _ := body["topk"].(float64)
		var result [][]map[string]any
		for q := range qs {
			var hits []map[string]any
			for i := range int(k) {
				hits = append(hits, map[string]any{"document": map[string]any{"id": fmt.Sprint(10*q + i), "contents": "\"Title\"\ntext"}, "score": 1.0 / float64(i+1)})
			}
			result = append(result, hits)
		}
		testkit.WriteJSON(w, http.StatusOK, map[string]any{"result": result})
	case "GET /api/v1/healthz":
		testkit.WriteJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	case "GET /api/v1/get_server_capabilities":
		var ms []map[string]any
		for _, m := range s.caps {
			ms = append(ms, map[string]any{"model_name": m})
		}
		testkit.WriteJSON(w, http.StatusOK, map[string]any{"supported_models": ms})
	case "DELETE /api/v1/training_runs/" + deleteProbeModel + "/checkpoints/" + deleteProbeID:
		// SkyRL's answer for a checkpoint it does not have (api.py).
		testkit.WriteJSON(w, http.StatusNotFound, map[string]any{"detail": "Checkpoint not found"})
	default:
		notFound()
	}
}

// opts are quick client options: no retries, a short timeout.
func quickOpts(role, url string) transport.Options {
	o := transport.DefaultOptions(role, url)
	o.Retries = 0
	o.Timeout = 5 * time.Second
	return o
}

// stackDeps are clients of the policy replicas at urls and of the judge,
// retriever and trainer at other (a stack's URL).
// The fake trainer has no sampling routes to tell its backend by: the
// recipe names it (trainer.backend), as a user's would for such a server.
func stackDeps(t *testing.T, r *recipes.Recipe, env map[string]string, other string, urls ...string) roles.Deps {
	t.Helper()
	if r.Trainer.Backend == recipes.BackendAuto {
		r.Trainer.Backend = recipes.BackendSkyRLFSDP
	}
	var d roles.Deps
	for _, u := range urls {
		p, err := policy.New(quickOpts("policy", u))
		if err != nil {
			t.Fatal(err)
		}
		d.Policies = append(d.Policies, p)
	}
	j, err := judge.New(quickOpts("judge", other), r.Judge.Model, env[r.Judge.APIKeyEnv])
	if err != nil {
		t.Fatal(err)
	}
	ret, err := retriever.New(quickOpts("retriever", other))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trainer.New(quickOpts("trainer", other), env[r.Trainer.APIKeyEnv])
	if err != nil {
		t.Fatal(err)
	}
	d.Judge, d.Retriever, d.Trainer = j, ret, tr
	d.Tokenizer = stackTokenizer()
	return d
}

// stackVocab is the fake stack's tokenizer (one id per byte, shifted by
// shift) as a local tokenizer.
type stackVocab struct{ shift int }

func (v stackVocab) TokenBytes(id int) ([]byte, bool) {
	if b := id - v.shift; b >= 0 && b < 256 {
		return []byte{byte(b)}, true
	}
	return nil, false
}

func (v stackVocab) AppendEncode(dst []int, text string) []int {
	for _, b := range []byte(text) {
		dst = append(dst, int(b)+v.shift)
	}
	return dst
}

// stackChat is the fake stack's chat template.
func stackChat(msgs []policy.Message, gen bool) string {
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "<|%v|>%v<|end|>", m.Role, m.Content)
	}
	if gen {
		b.WriteString("<|assistant|>")
	}
	return b.String()
}

// stackTokenizer is the local tokenizer that matches a fake stack.
func stackTokenizer() *roles.Tokenizer {
	return &roles.Tokenizer{Vocab: stackVocab{}, Chat: stackChat, Source: "the stack's bytes"}
}

// stackRecipe is the default recipe on the model "m" with its sync
// directory in a temporary directory.
func stackRecipe(t *testing.T) *recipes.Recipe {
	r := recipes.Defaults()
	r.Policy.Model = "m"
	r.Trainer.BaseModel = "m"
	r.Judge.Model = "judge-m"
	r.Sync.Dir = filepath.Join(t.TempDir(), "adapters")
	// A remote trainer whose checkpoints base is shared with this machine.
	r.Trainer.URL = "http://trainer.invalid"
	r.Trainer.CheckpointsDir = t.TempDir()
	return &r
}

func closedURL(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + l.Addr().String()
	l.Close()
	return u
}

// A healthy fake stack passes every check, and the probes are the
// protocol's requests.
func TestDoctorFakeStackHealthy(t *testing.T) {
	a, b := newStack(t, "m"), newStack(t, "m")
	r := stackRecipe(t)
	rep := Run(context.Background(), r, stackDeps(t, r, nil, a.URL, a.URL, b.URL), Options{})
	if f := rep.Failed(); len(f) > 0 {
		t.Fatalf("failures on a healthy stack:\n%s", report(t, rep))
	}
	tok := a.requests("/tokenize")
	// The bare and chat probes, the local tokenizer's probes and prompt,
	// then the sampled vs prefill probe's agent prompt.
	if len(tok) != 4+len(localTokenizerProbes) {
		t.Fatalf("%d /tokenize requests, want %d", len(tok), 4+len(localTokenizerProbes))
	}
	if bare := tok[0].body; bare["model"] != "m" || bare["prompt"] != tokenizeProbe || bare["add_special_tokens"] != false {
		t.Errorf("bare tokenize body %v", bare)
	}
	chat := tok[1].body
	msgs, _ := chat["messages"].([]any)
	if chat["model"] != "m" || chat["add_generation_prompt"] != true || len(msgs) != 1 ||
		msgs[0].(map[string]any)["role"] != "user" || msgs[0].(map[string]any)["content"] != tokenizeProbe {
		t.Errorf("chat tokenize body %v", chat)
	}
	comp := a.requests("/v1/completions")
	if len(comp) != 2+2*prefillProbeSeeds {
		t.Fatalf("%d completions, want a sample and a score, then the sampled vs prefill probe's %d of each", len(comp), prefillProbeSeeds)
	}
	if c := comp[0].body; c["model"] != "m" || c["max_tokens"] != float64(1) || c["return_tokens_as_token_ids"] != true ||
		c["logprobs"] != float64(1) || len(c["prompt"].([]any)) != len(tokenizeProbe) {
		t.Errorf("sampling probe %v", c)
	}
	if c := comp[1].body; c["prompt_logprobs"] != float64(0) || len(c["prompt"].([]any)) != len(tokenizeProbe) {
		t.Errorf("scoring probe %v", c)
	}
	if u := a.requests("/v1/unload_lora_adapter"); len(u) != 1 || u[0].body["lora_name"] == "" {
		t.Errorf("lora probe %v", u)
	}
	ret := a.requests("/retrieve")
	if len(ret) != 1 || ret[0].body["topk"] != float64(3) || ret[0].body["return_scores"] != true || len(ret[0].body["queries"].([]any)) != 2 {
		t.Errorf("retrieve probe %v", ret)
	}
	if j := a.requests("/v1/chat/completions"); len(j) != 1 || j[0].body["model"] != "judge-m" {
		t.Errorf("judge probe %v", j)
	}
	// The local tokenizer's probes, then the chat-templated prompt.
	for i, pr := range localTokenizerProbes {
		if body := tok[2+i].body; body["prompt"] != pr.text || body["add_special_tokens"] != false || body["model"] != "m" {
			t.Errorf("local tokenizer probe %s: body %v", pr.name, body)
		}
	}
	if msgs, _ := tok[len(tok)-2].body["messages"].([]any); len(msgs) != 1 || msgs[0].(map[string]any)["content"] != format.UserPrompt("who composed carmen", "") {
		t.Errorf("chat-templated prompt probe %v", tok[len(tok)-2].body)
	}
	if msgs, _ := tok[len(tok)-1].body["messages"].([]any); len(msgs) != 1 || msgs[0].(map[string]any)["content"] != format.UserPrompt(prefillProbeQuestion, "") {
		t.Errorf("sampled vs prefill probe prompt %v", tok[len(tok)-1].body)
	}
	if len(b.requests("/retrieve")) != 0 || len(b.requests("/tokenize")) != len(tok) {
		t.Error("the second replica got the wrong probes")
	}
}

// Search-R1's BM25 retriever sends documents without id: doctor passes
// them and says the ids are made from the contents.
func TestDoctorAcceptsSearchR1BM25Retriever(t *testing.T) {
	a, b := newStack(t, "m"), newStack(t, "m")
	a.retrieveAnswer = `{"result":[[{"document":{"title":"T","text":"x","contents":"\"T\"\nx"},"score":9.5}],` +
		`[{"document":{"title":"U","text":"y","contents":"\"U\"\ny"},"score":3}]]}`
	r := stackRecipe(t)
	rep := Run(context.Background(), r, stackDeps(t, r, nil, a.URL, a.URL, b.URL), Options{})
	if f := rep.Failed(); len(f) > 0 {
		t.Fatalf("failures:\n%s", report(t, rep))
	}
	for _, c := range rep.Checks {
		if c.Role == "retriever" && c.Name == "retrieve" {
			if c.Status != CheckOK || !strings.Contains(c.Detail, "no id: ids made from the contents") {
				t.Fatalf("retrieve check %+v", c)
			}
			return
		}
	}
	t.Fatal("no retrieve check")
}

// Each misconfiguration fails its check, names the fix, and leaves the
// other servers' checks alone.
func TestDoctorNamesEachProblemAndItsFix(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup breaks something; it gets the two replicas and the recipe.
		setup func(t *testing.T, a, b *stack, r *recipes.Recipe) (urls []string, env map[string]string)
		// fails are the failing rows; want the strings in the output ({a}:
		// the first replica's URL).
		fails []row
		want  []string
	}{
		{"server down", func(t *testing.T, a, b *stack, r *recipes.Recipe) ([]string, map[string]string) {
			return []string{a.URL, closedURL(t)}, nil
		}, []row{{"policy", "health", CheckFail}}, []string{"GET /health", "fix policy.urls"}},
		{"model not served", func(t *testing.T, a, b *stack, r *recipes.Recipe) ([]string, map[string]string) {
			b.models = []string{"other"}
			return []string{a.URL, b.URL}, nil
		}, []row{{"policy", "models", CheckFail}}, []string{`does not serve model "m" (it serves other)`, "--served-model-name m"}},
		{"lora routes missing", func(t *testing.T, a, b *stack, r *recipes.Recipe) ([]string, map[string]string) {
			b.noLoRA = true
			return []string{a.URL, b.URL}, nil
		}, []row{{"policy", "lora routes", CheckFail}}, []string{"--enable-lora --max-lora-rank 32", "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"}},
		{"sglang route missing", func(t *testing.T, a, b *stack, r *recipes.Recipe) ([]string, map[string]string) {
			r.Sync.Kind, r.Trainer.LoRARank = recipes.SyncSGLangDisk, 0
			a.sglang = true
			return []string{a.URL, b.URL}, nil
		}, []row{{"policy", "weights route", CheckFail}}, []string{"/update_weights_from_disk is not served", "python -m sglang.launch_server"}},
		{"tokenizers differ", func(t *testing.T, a, b *stack, r *recipes.Recipe) ([]string, map[string]string) {
			b.tokenShift = 1000
			return []string{a.URL, b.URL}, nil
		}, []row{{"policy", "tokenizer", CheckFail}, {"policy", "local tokenizer", CheckFail}}, []string{"tokenizes the probe differently from {a}", "first difference at token 0", "--tokenizer"}},
		{"teacher tokenizer differs", func(t *testing.T, a, b *stack, r *recipes.Recipe) ([]string, map[string]string) {
			r.Hindsight.Teacher = "big-teacher"
			for _, s := range []*stack{a, b} {
				s.models = append(s.models, "big-teacher")
				s.modelShift["big-teacher"] = 7
			}
			return []string{a.URL, b.URL}, nil
		}, []row{{"policy", "tokenizer", CheckFail}}, []string{`"m" and the teacher "big-teacher" tokenize the probe differently`, "same model family"}},
		{"no chat template", func(t *testing.T, a, b *stack, r *recipes.Recipe) ([]string, map[string]string) {
			a.noChatTemplate = true
			return []string{a.URL, b.URL}, nil
		}, []row{{"policy", "chat template", CheckFail}}, []string{"status 400", "--chat-template"}},
		{"completions without token ids", func(t *testing.T, a, b *stack, r *recipes.Recipe) ([]string, map[string]string) {
			b.textTokens = true
			return []string{a.URL, b.URL}, nil
		}, []row{{"policy", "logprobs", CheckFail}}, []string{"return_tokens_as_token_ids", "prompt_logprobs"}},
		{"judge 401", func(t *testing.T, a, b *stack, r *recipes.Recipe) ([]string, map[string]string) {
			a.judgeKey = "right-key"
			r.Judge.APIKeyEnv = "JUDGE_API_KEY"
			return []string{a.URL, b.URL}, map[string]string{"JUDGE_API_KEY": "wrong-secret-value"}
		}, []row{{"judge", "chat", CheckFail}}, []string{"status 401", "set JUDGE_API_KEY to a key this server accepts"}},
		{"judge key not set", func(t *testing.T, a, b *stack, r *recipes.Recipe) ([]string, map[string]string) {
			a.judgeKey = "right-key"
			r.Judge.APIKeyEnv = "JUDGE_API_KEY"
			return []string{a.URL, b.URL}, nil
		}, []row{{"judge", "api key", CheckFail}, {"judge", "chat", CheckFail}}, []string{"JUDGE_API_KEY (named by judge.api_key_env) is not set, and the server refused", "fix: export JUDGE_API_KEY=<the key>"}},
		{"trainer key not set", func(t *testing.T, a, b *stack, r *recipes.Recipe) ([]string, map[string]string) {
			a.trainerKey = "tml-key"
			r.Trainer.APIKeyEnv = "TINKER_API_KEY"
			return []string{a.URL, b.URL}, nil
		}, []row{{"trainer", "api key", CheckFail}, {"trainer", "healthz", CheckFail}}, []string{"status 401", "fix: export TINKER_API_KEY=<the key> before running orchestrate (trainer.api_key_env names it) (it is sent as X-API-Key)"}},
		{"retriever wrong shape", func(t *testing.T, a, b *stack, r *recipes.Recipe) ([]string, map[string]string) {
			a.retrieveAnswer = `{"result": [[{"document": {"id": "1", "text": "no contents"}, "score": 1}], []]}`
			return []string{a.URL, b.URL}, nil
		}, []row{{"retriever", "retrieve", CheckFail}}, []string{"without contents", `"document": {"id", "contents"} or {"title", "text", "contents"}, "score"`}},
		{"retriever one list for two queries", func(t *testing.T, a, b *stack, r *recipes.Recipe) ([]string, map[string]string) {
			a.retrieveAnswer = `{"result": [[{"document": {"id": "1", "contents": "\"T\"\nx"}, "score": 1}]]}`
			return []string{a.URL, b.URL}, nil
		}, []row{{"retriever", "retrieve", CheckFail}}, []string{"1 results for 2 queries", "one list per query"}},
		{"trainer lacks the base model", func(t *testing.T, a, b *stack, r *recipes.Recipe) ([]string, map[string]string) {
			a.caps = []string{"Qwen/Qwen3-4B", "meta-llama/Llama-3.2-3B"}
			return []string{a.URL, b.URL}, nil
		}, []row{{"trainer", "base model", CheckFail}}, []string{`does not support base model "m"`, "set trainer.base_model to one of: Qwen/Qwen3-4B, meta-llama/Llama-3.2-3B"}},
		{"full weights with lora sync", func(t *testing.T, a, b *stack, r *recipes.Recipe) ([]string, map[string]string) {
			r.Trainer.LoRARank = 0
			return []string{a.URL, b.URL}, nil
		}, []row{{"trainer", "weights", CheckFail}}, []string{"trainer.lora_rank 0 trains full weights, but sync.kind lora loads LoRA adapters", "set sync.kind sglang_disk"}},
		{"lora rank with full-weight sync", func(t *testing.T, a, b *stack, r *recipes.Recipe) ([]string, map[string]string) {
			r.Sync.Kind, r.Trainer.LoRARank = recipes.SyncSGLangDisk, 32
			a.sglang, b.sglang = true, true
			return []string{a.URL, b.URL}, nil
		}, []row{{"trainer", "weights", CheckFail}}, []string{"trainer.lora_rank 32 trains a LoRA adapter, but sync.kind sglang_disk reloads merged full weights",
			"set trainer.lora_rank: 0 for full fine-tuning", "--max-lora-rank 32"}},
		{"checkpoints dir is a file", func(t *testing.T, a, b *stack, r *recipes.Recipe) ([]string, map[string]string) {
			f := filepath.Join(t.TempDir(), "ckpt")
			if err := os.WriteFile(f, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			r.Trainer.CheckpointsDir = f
			return []string{a.URL, b.URL}, nil
		}, []row{{"trainer", "checkpoints dir", CheckFail}}, []string{"is not a directory", "set trainer.checkpoints_dir to the trainer's checkpoints base"}},
		{"sync dir not writable", func(t *testing.T, a, b *stack, r *recipes.Recipe) ([]string, map[string]string) {
			f := filepath.Join(t.TempDir(), "file")
			if err := os.WriteFile(f, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			r.Sync.Dir = filepath.Join(f, "adapters")
			return []string{a.URL, b.URL}, nil
		}, []row{{"sync", "sync dir", CheckFail}}, []string{"not a directory", "set sync.dir to a writable directory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newStack(t, "m"), newStack(t, "m")
			r := stackRecipe(t)
			urls, env := tc.setup(t, a, b, r)
			var environ []string
			for k, v := range env {
				environ = append(environ, k+"="+v)
			}
			rep := Run(context.Background(), r, stackDeps(t, r, env, a.URL, urls...), Options{Environ: environ})
			out := report(t, rep)
			failed := rep.Failed()
			if len(failed) == 0 {
				t.Fatalf("no failure:\n%s", out)
			}
			for _, f := range failed {
				if !slices.Contains(tc.fails, row{f.Role, f.Name, f.Status}) {
					t.Errorf("unexpected failure %s %s: %s", f.Role, f.Name, f.Detail)
				}
				if f.Fix == "" {
					t.Errorf("failure %s %s has no fix", f.Role, f.Name)
				}
			}
			for _, f := range tc.fails {
				if !slices.ContainsFunc(failed, func(c Check) bool { return c.Role == f.role && c.Name == f.name }) {
					t.Errorf("%s %s did not fail", f.role, f.name)
				}
			}
			for _, w := range append(tc.want, "FAIL "+tc.fails[0].role, "fix: ", "checks failed") {
				if w = strings.ReplaceAll(w, "{a}", a.URL); !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, v := range env {
				if strings.Contains(out, v) {
					t.Errorf("output shows the secret %q", v)
				}
			}
		})
	}
}

// An unset key variable is a warning when the server needs no key, and the
// value of a set one is never shown.
func TestDoctorAPIKeyWarnings(t *testing.T) {
	a := newStack(t, "m")
	r := stackRecipe(t)
	r.Judge.APIKeyEnv = "JUDGE_API_KEY"
	r.Trainer.APIKeyEnv = "TINKER_API_KEY"
	env := map[string]string{"TINKER_API_KEY": "tml-secret-value"}
	rep := Run(context.Background(), r, stackDeps(t, r, env, a.URL, a.URL), Options{Environ: []string{"TINKER_API_KEY=tml-secret-value"}})
	out := report(t, rep)
	if f := rep.Failed(); len(f) > 0 {
		t.Fatalf("failures:\n%s", out)
	}
	var got []row
	for _, c := range rep.Checks {
		if c.Name == "api key" {
			got = append(got, row{c.Role, c.Name, c.Status})
		}
	}
	if want := []row{{"judge", "api key", CheckWarn}, {"trainer", "api key", CheckOK}}; !slices.Equal(got, want) {
		t.Fatalf("key rows %v, want %v\n%s", got, want, out)
	}
	for _, w := range []string{"JUDGE_API_KEY (named by judge.api_key_env) is not set: requests go without a key, which this server accepted", "TINKER_API_KEY is set (value not shown)", "1 warnings"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "tml-secret-value") {
		t.Error("the key's value is shown")
	}
	if h := a.requests("/api/v1/get_server_capabilities"); len(h) != 1 || h[0].key != "tml-secret-value" {
		t.Error("the capabilities probe did not carry the trainer's key")
	}
	if j := a.requests("/v1/chat/completions"); len(j) != 1 || j[0].auth != "" {
		t.Error("the judge probe carried a key although none is set")
	}
}

// A checkpoints base that does not exist yet is a warning naming the
// trainer flag; an existing one is fine.
func TestDoctorCheckpointsDir(t *testing.T) {
	dir := t.TempDir()
	if c := checkpointsDir(dir, diskNeed{}); c.Status != CheckOK {
		t.Errorf("existing dir: %+v", c)
	}
	// Free space against checkpoint.keep's need: Qwen2.5-3B at rank 0
	// needs (keep+1) x 37 GB + 3 x 12.4 GB; more than any disk is a warning.
	r := &recipes.Recipe{}
	r.Trainer.BaseModel, r.Trainer.URL, r.Checkpoint.Keep = "Qwen/Qwen2.5-3B-Instruct", "http://127.0.0.1:8300", 2
	need := checkpointDiskNeed(r)
	if need.bytes != 3*37_080_000_000+3*12_360_000_000 || !strings.Contains(need.how, "(checkpoint.keep 2 + 1) x 37.1 GB a state + 3 x 12.4 GB a sampler export") {
		t.Errorf("need %+v", need)
	}
	if c := checkpointsDir(dir, diskNeed{bytes: 1 << 62, how: "huge"}); c.Status != CheckWarn || !strings.Contains(c.Detail, "free, but the trainer needs") || !strings.Contains(c.Fix, "checkpoint.keep") {
		t.Errorf("too little space: %+v", c)
	}
	if c := checkpointsDir(dir, diskNeed{bytes: 1000, how: "tiny"}); c.Status != CheckOK || !strings.Contains(c.Detail, "free, the trainer needs ~1.0 KB at peak (tiny)") {
		t.Errorf("enough space: %+v", c)
	}
	missing := filepath.Join(dir, "not-yet")
	c := checkpointsDir(missing, diskNeed{})
	if c.Status != CheckWarn || !strings.Contains(c.Fix, "--checkpoints-base "+missing) {
		t.Errorf("missing dir: %+v", c)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Error("the check created the directory")
	}
}

// A replica that is down gets its other rows skipped, not failed.
func TestDoctorSkipsAfterHealthFails(t *testing.T) {
	a := newStack(t, "m")
	r := stackRecipe(t)
	dead := closedURL(t)
	rep := Run(context.Background(), r, stackDeps(t, r, nil, a.URL, dead), Options{})
	var got []row
	for _, c := range rep.Checks {
		if c.Server == dead {
			got = append(got, row{c.Role, c.Name, c.Status})
		}
	}
	want := []row{{"policy", "health", CheckFail}, {"policy", "models", CheckSkip}, {"policy", "lora routes", CheckSkip},
		{"policy", "chat template", CheckSkip}, {"policy", "logprobs", CheckSkip}, {"policy", prefillRow, CheckSkip}, {"policy", "tokenizer", CheckSkip}, {"policy", "local tokenizer", CheckSkip}}
	if !slices.Equal(got, want) {
		t.Fatalf("rows of the dead replica %v, want %v", got, want)
	}
}

// SGLang's refusal of a missing path means the route is there.
func TestDoctorSGLangRoute(t *testing.T) {
	a := newStack(t, "m")
	a.sglang = true
	r := stackRecipe(t)
	r.Sync.Kind, r.Trainer.LoRARank = recipes.SyncSGLangDisk, 0
	rep := Run(context.Background(), r, stackDeps(t, r, nil, a.URL, a.URL), Options{})
	if f := rep.Failed(); len(f) > 0 {
		t.Fatalf("failures:\n%s", report(t, rep))
	}
	reqs := a.requests("/update_weights_from_disk")
	if len(reqs) != 1 || reqs[0].body["model_path"] != probeMissingPath {
		t.Fatalf("weights probe %v", reqs)
	}
	if len(a.requests("/v1/unload_lora_adapter")) != 0 {
		t.Error("the LoRA routes were probed with sync.kind sglang_disk")
	}
}

// Replicas on other hosts get a warning about the sync directory, which
// does not fail the report.
func TestDoctorWarnsAboutRemoteSyncDir(t *testing.T) {
	r := stackRecipe(t)
	c := newChecker(r, roles.Deps{Policies: []policy.Policy{urlPolicy{url: "http://gpu1:8000"}, urlPolicy{url: "http://127.0.0.1:8001"}}}, nil, 0, true)
	checks := c.syncDir()
	if len(checks) != 2 || checks[0].Status != CheckOK || checks[1].Status != CheckWarn {
		t.Fatalf("checks %+v", checks)
	}
	if d := checks[1].Detail; !strings.Contains(d, "gpu1") || strings.Contains(d, "127.0.0.1") || !strings.Contains(d, "mount at the same path") {
		t.Errorf("detail %q", d)
	}
	rep := &Report{Checks: checks}
	if len(rep.Failed()) != 0 || !strings.Contains(report(t, rep), "1 warnings") {
		t.Errorf("a warning fails the report:\n%s", report(t, rep))
	}
}

// Preflight is the fast subset of the same checks: it fails on what the
// run cannot survive and makes no judge, tokenizer or sync dir probe.
func TestPreflightIsDoctorSubset(t *testing.T) {
	a := newStack(t, "m")
	r := stackRecipe(t)
	deps := stackDeps(t, r, nil, a.URL, a.URL)
	if err := Preflight(context.Background(), r, deps); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/v1/chat/completions", "/tokenize", "/api/v1/healthz"} {
		if n := len(a.requests(p)); n != 0 {
			t.Errorf("preflight sent %d requests to %s", n, p)
		}
	}
	for _, p := range []string{"/health", "/v1/models", "/v1/unload_lora_adapter", "/retrieve", "/api/v1/get_server_capabilities"} {
		if n := len(a.requests(p)); n != 1 {
			t.Errorf("preflight sent %d requests to %s, want 1", n, p)
		}
	}
	if _, err := os.Stat(r.Sync.Dir); !os.IsNotExist(err) {
		t.Errorf("preflight touched the sync dir (%v)", err)
	}
	r.Sync.Kind = recipes.SyncSGLangDisk
	err := Preflight(context.Background(), r, deps)
	if err == nil || !strings.Contains(err.Error(), "policy "+a.URL) || !strings.Contains(err.Error(), "sglang.launch_server") {
		t.Fatalf("preflight with the weights route missing: %v", err)
	}
}

// trainerRow is the trainer's row named name in rep (zero if none).
func trainerRow(rep *Report, name string) Check {
	for _, c := range rep.Checks {
		if c.Role == "trainer" && c.Name == name {
			return c
		}
	}
	return Check{}
}

// doctorStack runs doctor on a healthy fake stack (serving SGLang's
// weights route too) with the recipe edit applies.
func doctorStack(t *testing.T, edit func(r *recipes.Recipe)) *Report {
	t.Helper()
	a := newStack(t, "m")
	a.sglang = true
	r := stackRecipe(t)
	edit(r)
	return Run(context.Background(), r, stackDeps(t, r, nil, a.URL, a.URL), Options{})
}

// The weights row says what trainer.lora_rank trains and how sync.kind
// loads it: rank 0 is full weights for sglang_disk, a rank above 0 an
// adapter for lora.
func TestDoctorExplainsRankAndSyncKind(t *testing.T) {
	for _, tc := range []struct {
		rank int
		kind string
		want string
	}{
		{0, recipes.SyncSGLangDisk, "lora_rank 0: full fine-tuning, which needs SkyRL's fsdp or megatron backend"},
		{0, recipes.SyncNone, "sync.kind none loads no weights"},
		{32, recipes.SyncLoRA, "lora_rank 32: a LoRA adapter, hot-loaded with /v1/load_lora_adapter (vLLM's --max-lora-rank at least 32)"},
	} {
		rep := doctorStack(t, func(r *recipes.Recipe) { r.Trainer.LoRARank, r.Sync.Kind = tc.rank, tc.kind })
		if ch := trainerRow(rep, "weights"); ch.Status != CheckOK || !strings.Contains(ch.Detail, tc.want) {
			t.Errorf("rank %d, %s: weights row %+v", tc.rank, tc.kind, ch)
		}
	}
}

// With lora_rank 0 (SkyRL's fsdp or megatron backend, whose optim_step
// applies only the learning rate) doctor warns about Adam settings that
// differ from the backend's fixed ones, naming both; equal settings pass;
// for a LoRA rank the backend is unknown and a difference is only noted;
// the simulated trainer applies them all.
func TestDoctorWarnsAboutFSDPFixedOptimizer(t *testing.T) {
	full := func(r *recipes.Recipe) {
		r.Sync.Kind, r.Trainer.LoRARank = recipes.SyncSGLangDisk, 0
		r.Trainer.Beta2, r.Trainer.WeightDecay = 0.95, 0 // the defaults
	}
	rep := doctorStack(t, full)
	opt := trainerRow(rep, "optimizer")
	if opt.Status != CheckWarn {
		t.Fatalf("optimizer row %+v, want a warning\n%s", opt, report(t, rep))
	}
	for _, w := range []string{"applies only learning_rate", "trainer.beta2 0.95 (the backend's 0.999)", "trainer.weight_decay 0 (the backend's 0.01)"} {
		if !strings.Contains(opt.Detail, w) {
			t.Errorf("detail %q lacks %q", opt.Detail, w)
		}
	}
	if strings.Contains(opt.Detail, "trainer.beta1") || !strings.Contains(opt.Fix, "trainer.beta2: 0.999") || !strings.Contains(opt.Fix, "--backend-config") {
		t.Errorf("detail %q, fix %q", opt.Detail, opt.Fix)
	}
	if len(rep.Failed()) != 0 || !strings.Contains(report(t, rep), "warn trainer") {
		t.Errorf("the warning failed the report or was not shown:\n%s", report(t, rep))
	}

	for _, tc := range []struct {
		name string
		edit func(r *recipes.Recipe)
		want CheckStatus
		text string
	}{
		{"the backend's own settings", func(r *recipes.Recipe) {
			full(r)
			r.Trainer.Beta1, r.Trainer.Beta2, r.Trainer.Eps, r.Trainer.WeightDecay = 0.9, 0.999, 1e-8, 0.01
		}, CheckOK, "hold on any backend"},
		{"a LoRA rank", func(r *recipes.Recipe) { r.Trainer.Beta2 = 0.95 }, CheckSkip, "cannot tell the backend"},
	} {
		if ch := trainerRow(doctorStack(t, tc.edit), "optimizer"); ch.Status != tc.want || !strings.Contains(ch.Detail, tc.text) {
			t.Errorf("%s: %+v", tc.name, ch)
		}
	}
	// The embedded default (TestDoctorEmbeddedDefault) has the row ok:
	// the simulated trainer applies every field.
}

// The local tokenizer row compares policy.tokenizer with each replica's
// POST /tokenize on the probe texts and the chat-templated prompt, and
// fails naming the probe, the replica, the first differing token and the
// two ids, with the fix; a chat template that differs only warns with
// policy.tokenize server; no local tokenizer fails with its reason.
func TestDoctorComparesTheLocalTokenizer(t *testing.T) {
	ctx := context.Background()
	failed := func(rep *Report) []Check {
		var out []Check
		for _, c := range rep.Checks {
			if c.Name == "local tokenizer" && c.Status != CheckOK {
				out = append(out, c)
			}
		}
		return out
	}
	a, b := newStack(t, "m"), newStack(t, "m")
	r := stackRecipe(t)

	// A local tokenizer that differs on a non-ASCII byte: the accents probe.
	deps := stackDeps(t, r, nil, a.URL, a.URL, b.URL)
	deps.Tokenizer = &roles.Tokenizer{Vocab: highShift{}, Chat: stackChat, Source: "/tok/tokenizer.json"}
	rep := Run(ctx, r, deps, Options{})
	bad := failed(rep)
	if len(bad) != 2 || bad[0].Server != a.URL || bad[1].Server != b.URL || bad[0].Status != CheckFail {
		t.Fatalf("local tokenizer rows:\n%s", report(t, rep))
	}
	d := bad[0].Detail
	for _, w := range []string{"the accents probe", "first difference at token 2: 1195 (local) vs 195 (server)", "local tokenizer: /tok/tokenizer.json"} {
		if !strings.Contains(d, w) {
			t.Errorf("detail lacks %q: %s", w, d)
		}
	}
	if f := bad[0].Fix; !strings.Contains(f, "set policy.tokenizer to the tokenizer.json of the model this server serves") || !strings.Contains(f, "docs/gpu.md") {
		t.Errorf("fix %q", f)
	}
	out := report(t, rep)
	if !strings.Contains(out, "FAIL policy "+a.URL+" local tokenizer: the accents probe") {
		t.Errorf("report:\n%s", out)
	}

	// The same encoding but other bytes per id: the server's ids do not
	// spell the probe under the local tokenizer.
	deps.Tokenizer = &roles.Tokenizer{Vocab: wrongBytes{}, Chat: stackChat, Source: "x"}
	if bad := failed(Run(ctx, r, deps, Options{})); len(bad) != 2 || !strings.Contains(bad[0].Detail, "the ASCII probe") ||
		!strings.Contains(bad[0].Detail, "under the local tokenizer, not the probe: first difference at byte 0") {
		t.Errorf("wrong bytes: %+v", bad)
	}

	// Another chat template: a warning with policy.tokenize server, a
	// failure with local.
	deps.Tokenizer = &roles.Tokenizer{Vocab: stackVocab{}, Chat: roles.Qwen25Chat, Source: "qwen"}
	bad = failed(Run(ctx, r, deps, Options{}))
	if len(bad) != 2 || bad[0].Status != CheckWarn || !strings.Contains(bad[0].Detail, "the chat-templated prompt differs") || !strings.Contains(bad[0].Fix, "keep policy.tokenize: server") {
		t.Errorf("chat template, server mode: %+v", bad)
	}
	r.Policy.Tokenize = recipes.TokenizeLocal
	bad = failed(Run(ctx, r, deps, Options{}))
	if len(bad) != 2 || bad[0].Status != CheckFail || !strings.Contains(bad[0].Detail, "Qwen2.5's chat template") || !strings.Contains(bad[0].Fix, "set policy.tokenize: server") {
		t.Errorf("chat template, local mode: %+v", bad)
	}

	// No local tokenizer: the reason, on every replica, even one that is
	// down.
	deps = stackDeps(t, r, nil, a.URL, a.URL, closedURL(t))
	deps.Tokenizer, deps.TokenizerErr = nil, errors.New("policy.tokenizer auto: no m in the Hugging Face cache")
	bad = failed(Run(ctx, r, deps, Options{}))
	if len(bad) != 2 || bad[0].Status != CheckFail || bad[1].Status != CheckFail || bad[0].Detail != deps.TokenizerErr.Error() || bad[1].Fix == "" {
		t.Errorf("no tokenizer: %+v", bad)
	}
	// Auto's own error: the path looked at in the detail, the remedy in
	// the fix.
	remote := *r
	remote.Policy.URLs = []string{a.URL}
	_, deps.TokenizerErr = setup.ResolveTokenizer(&remote, []string{"HOME=" + t.TempDir()}, nil, nil)
	bad = failed(Run(ctx, r, deps, Options{}))
	if len(bad) != 2 || !strings.HasPrefix(bad[1].Detail, "policy.tokenizer auto: no m in the Hugging Face cache (looked for ") ||
		!strings.HasSuffix(bad[1].Detail, "models--m/snapshots/*/tokenizer.json)") || !strings.HasPrefix(bad[1].Fix, "download it (huggingface-cli download m tokenizer.json)") {
		t.Errorf("no tokenizer in the cache: %+v", bad)
	}
}

// highShift encodes bytes above 0x7f 1000 higher than the stack.
type highShift struct{ stackVocab }

func (highShift) AppendEncode(dst []int, text string) []int {
	for _, b := range []byte(text) {
		if b > 0x7f {
			dst = append(dst, int(b)+1000)
		} else {
			dst = append(dst, int(b))
		}
	}
	return dst
}

// wrongBytes encodes as the stack but gives each id another byte.
type wrongBytes struct{ stackVocab }

func (wrongBytes) TokenBytes(id int) ([]byte, bool) { return []byte{byte(id + 1)}, true }

// A trainer without the DELETE checkpoint route (skyrl 0.3.0 from PyPI,
// played by the simulator) is a warning that says the disk keeps every
// checkpoint, never an ok.
func TestDoctorNoDeleteRoute(t *testing.T) {
	r := testRecipe(t, "", "sim.trainer.delete_route=false")
	deps, emb, err := setup.Connect(context.Background(), r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	rep := Run(context.Background(), r, deps, Options{})
	for _, c := range rep.Checks {
		if c.Role == "trainer" && c.Name == "delete route" {
			if c.Status != CheckWarn || !strings.Contains(c.Detail, "removes superseded checkpoints") || !strings.Contains(c.Detail, "2026-07-16") {
				t.Errorf("delete route row: %+v", c)
			}
			return
		}
	}
	t.Fatalf("no delete route row:\n%s", report(t, rep))
}

// The teacher row names the servers that score the hinted contexts: the
// reference servers for an initial teacher when reference.urls are named,
// else the policy servers (or the Tinker server's base-model sessions);
// no row without a teacher.
func TestTeacherRowNamesItsServers(t *testing.T) {
	r := testRecipe(t, "", "hindsight.teacher=initial")
	r.Reference.URLs = []string{"http://127.0.0.1:8002"}
	r.Policy.URLs = []string{"http://127.0.0.1:8000", "http://127.0.0.1:8001"}
	for _, c := range []struct {
		edit         func()
		server, want string
	}{
		{func() {}, "http://127.0.0.1:8002", "on the reference servers"},
		{func() { r.Reference.URLs = nil }, "http://127.0.0.1:8000, http://127.0.0.1:8001", "keep the base weights served"},
		{func() { r.Hindsight.Teacher = recipes.TeacherSelf }, "http://127.0.0.1:8000, http://127.0.0.1:8001", "own sampling weights"},
	} {
		c.edit()
		rows := teacherCheck(r)
		if len(rows) != 1 || rows[0].Server != c.server || !strings.Contains(rows[0].Detail, c.want) {
			t.Errorf("teacher %s, references %v: rows %+v, want server %q and %q", r.Hindsight.Teacher, r.Reference.URLs, rows, c.server, c.want)
		}
	}
	r.Hindsight.Loss = recipes.HindsightLossNone
	if rows := teacherCheck(r); len(rows) != 0 {
		t.Errorf("loss none: rows %+v", rows)
	}
}
