package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hindsearch/hindsearch/clients/judge"
	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/recipes"
)

// fieldProxy forwards every request to target unchanged, except that it
// deletes the JSON field drop (when set) from the bodies of POST path; it
// records the bodies it forwards to path.
type fieldProxy struct {
	target, path, drop string

	mu     sync.Mutex
	bodies []map[string]any
}

func (p *fieldProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if r.Method == http.MethodPost && r.URL.Path == p.path {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if p.drop != "" {
			delete(m, p.drop)
			if body, err = json.Marshal(m); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		p.mu.Lock()
		p.bodies = append(p.bodies, m)
		p.mu.Unlock()
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// proxiedRun runs r against its embedded servers with the policy and judge
// traffic going through fieldProxies dropping dropPolicy from completion
// requests and dropJudge from chat requests; it returns the batch digests
// and the proxies (policy replicas first, the judge last).
func proxiedRun(t *testing.T, r *recipes.Recipe, dropPolicy, dropJudge string) ([]string, []*fieldProxy) {
	t.Helper()
	ctx := context.Background()
	deps, emb, err := setup.Connect(ctx, r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	serve := func(p *fieldProxy) string {
		srv := httptest.NewServer(p)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	var proxies []*fieldProxy
	for i, u := range emb.Sim().PolicyURLs {
		p := &fieldProxy{target: u, path: "/v1/completions", drop: dropPolicy}
		proxies = append(proxies, p)
		c, err := policy.New(transport.DefaultOptions("policy", serve(p)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		deps.Policies[i] = c
	}
	jp := &fieldProxy{target: emb.Sim().JudgeURL, path: "/v1/chat/completions", drop: dropJudge}
	proxies = append(proxies, jp)
	jc, err := judge.New(transport.DefaultOptions("judge", serve(jp)), r.Judge.Model, "", roles.JudgeOptions(r)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(jc.Close)
	deps.Judge = jc
	var out bytes.Buffer
	sum, err := (&Runner{Recipe: r, Deps: deps, Out: &out}).Run(ctx)
	if err != nil {
		t.Fatalf("run (dropping %q / %q): %v\n%s", dropPolicy, dropJudge, err, out.String())
	}
	return stepDigests(sum), proxies
}

// Every request of a run that samples or scores carries all seven sampling
// fields with the values the recipe means: rollouts the train.* keys,
// greedy evaluation and teacher scoring temperature 0 with everything else
// off, the judge judge.temperature with everything else off, its token cap
// in judge.max_tokens_field. None relies on the server's generation config.
func TestRunRequestsSendEverySamplingField(t *testing.T) {
	r := testRecipe(t, "", "train.steps=1", "eval.every=1", "eval.per_dataset=2", "eval.datasets.nq=",
		"train.temperature=0.9", "train.top_p=0.95", "train.top_k=50", "train.min_p=0.01", "train.repetition_penalty=1.1",
		"train.presence_penalty=0.1", "train.frequency_penalty=0.2", "judge.temperature=0.3", "judge.max_tokens_field=max_completion_tokens")
	_, proxies := proxiedRun(t, r, "", "")
	num := func(m map[string]any, k string) (float64, bool) {
		n, ok := m[k].(json.Number)
		if !ok {
			return 0, false
		}
		f, err := n.Float64()
		return f, err == nil
	}
	check := func(what string, m map[string]any, want map[string]float64) {
		t.Helper()
		for k, v := range want {
			if got, ok := num(m, k); !ok || got != v {
				t.Fatalf("%s request: %s = %v, want %v (body %v)", what, k, m[k], v, m)
			}
		}
	}
	train := map[string]float64{"temperature": 0.9, "top_p": 0.95, "top_k": 50, "min_p": 0.01, "repetition_penalty": 1.1,
		"presence_penalty": 0.1, "frequency_penalty": 0.2}
	greedy := map[string]float64{"temperature": 0, "top_p": 1, "top_k": -1, "min_p": 0, "repetition_penalty": 1,
		"presence_penalty": 0, "frequency_penalty": 0}
	kinds := map[string]int{}
	for _, p := range proxies[:len(proxies)-1] {
		for _, m := range p.bodies {
			_, scoring := m["prompt_logprobs"]
			temp, _ := num(m, "temperature")
			switch {
			case scoring:
				kinds["scoring"]++
				check("scoring", m, greedy)
			case temp == 0:
				kinds["eval"]++
				check("evaluation", m, greedy)
			default:
				kinds["rollout"]++
				check("rollout", m, train)
			}
		}
	}
	jb := proxies[len(proxies)-1].bodies
	for _, m := range jb {
		check("judge", m, map[string]float64{"temperature": 0.3, "top_p": 1, "top_k": -1, "min_p": 0, "repetition_penalty": 1,
			"presence_penalty": 0, "frequency_penalty": 0, "max_completion_tokens": float64(r.Judge.MaxTokens)})
		if _, ok := m["max_tokens"]; ok {
			t.Fatalf("judge request has max_tokens besides max_completion_tokens: %v", m)
		}
	}
	if kinds["rollout"] == 0 || kinds["scoring"] == 0 || kinds["eval"] == 0 || len(jb) == 0 {
		t.Fatalf("requests seen: %v and %d judge requests; want every kind", kinds, len(jb))
	}
	t.Logf("checked %v and %d judge requests", kinds, len(jb))
}

// The simulator makes an omitted sampling field visible: a run whose
// requests lose one field (through a proxy) samples with the model's
// generation config instead and sends other batches, as it would on vLLM.
// Dropping a field no generation config sets (presence_penalty, 0 anyway)
// changes nothing, and neither does the proxy itself.
func TestDroppedSamplingFieldChangesTheBatches(t *testing.T) {
	// The simulated model's file gets a min_p (Qwen2.5's has none) and a
	// top_k small enough to cut its candidates (its tail is a 1e-6 floor,
	// which Qwen2.5's top_k 20 cuts without a visible effect). The OPD
	// term is two-sided on every policy token, so that any change of a
	// critique shows in the teacher's logprobs.
	sets := []string{"train.steps=1", "eval.datasets.nq=", "eval.datasets.hotpotqa=",
		"sim.generation_config.min_p=0.3", "sim.generation_config.top_k=2",
		"hindsight.loss=reverse_kl", "hindsight.broadcast=response"}
	r := testRecipe(t, "", sets...)
	direct, _ := runRecipe(t, r, 1)
	base, _ := proxiedRun(t, testRecipe(t, "", sets...), "", "")
	if strings.Join(base, ",") != strings.Join(stepDigests(direct), ",") {
		t.Fatalf("the proxy changes the batches: %v, direct %v", base, stepDigests(direct))
	}
	for _, tc := range []struct {
		policyField, judgeField string
		changes                 bool
	}{
		{"temperature", "", true},
		{"top_p", "", true},
		{"top_k", "", true},
		{"min_p", "", true},
		{"repetition_penalty", "", true},
		{"", "temperature", true},
		{"presence_penalty", "", false},
	} {
		got, _ := proxiedRun(t, testRecipe(t, "", sets...), tc.policyField, tc.judgeField)
		if changed := strings.Join(got, ",") != strings.Join(base, ","); changed != tc.changes {
			t.Errorf("dropping policy %q / judge %q: batches changed %v, want %v (%v vs %v)", tc.policyField, tc.judgeField, changed, tc.changes, got, base)
		}
	}
}
