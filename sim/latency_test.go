package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/recipes"
)

// newTimedPolicy starts a simulated policy with latency l over httptest.
// The engine is closed before the HTTP server (cleanups run last first).
func newTimedPolicy(t *testing.T, l Latency) (*PolicyServer, string) {
	t.Helper()
	ps := NewPolicyServer(getFixture(t).model, testBase)
	ps.SetLatency(l)
	srv := httptest.NewServer(ps.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(ps.Close)
	return ps, srv.URL
}

// gateEngine makes the engine wait before each step for a value on step,
// until release is called (release is idempotent and also runs at
// cleanup).
func gateEngine(t *testing.T, ps *PolicyServer) (step chan<- struct{}, release func()) {
	t.Helper()
	gate := make(chan struct{})
	steps := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	ps.eng.mu.Lock()
	ps.eng.hook = func() {
		select {
		case <-steps:
		case <-gate:
		}
	}
	ps.eng.mu.Unlock()
	t.Cleanup(release)
	return steps, release
}

// completionBody is a Search-R1 turn request for question q.
func completionBody(t *testing.T, q string, seed int64, extra map[string]any) []byte {
	t.Helper()
	req := map[string]any{"model": testBase, "prompt": promptText(q, ""), "max_tokens": 40, "seed": seed,
		"temperature": 1, "top_p": 1, "top_k": -1, "stop": format.StopStrings, "include_stop_str_in_output": true,
		"logprobs": 0}
	for k, v := range extra {
		req[k] = v
	}
	raw, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// timedResult is one completion's answer.
type timedResult struct {
	status int
	header http.Header
	body   completion
	err    error
}

func postCompletion(ctx context.Context, url string, body []byte) timedResult {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return timedResult{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return timedResult{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return timedResult{err: err}
	}
	r := timedResult{status: resp.StatusCode, header: resp.Header}
	if resp.StatusCode == http.StatusOK {
		r.err = json.Unmarshal(b, &r.body)
	}
	return r
}

// waitFor polls cond until it holds or 10 s pass (a bound for a stuck
// test, not a timing assertion).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func headerFloat(t *testing.T, h http.Header, name string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(h.Get(name), 64)
	if err != nil {
		t.Fatalf("header %s = %q: %v", name, h.Get(name), err)
	}
	return v
}

func metricsText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestEngineCapacityQueue sends 5 concurrent requests to a replica of
// capacity 2 whose steps the test holds: 2 run and 3 wait (in the stats and
// the vLLM gauges); once released, all complete.
func TestEngineCapacityQueue(t *testing.T) {
	f := getFixture(t)
	ps, url := newTimedPolicy(t, Latency{Capacity: 2, DecodeStep: time.Millisecond, ThinkTokens: 3})
	step, release := gateEngine(t, ps)
	results := make([]timedResult, 5)
	var wg sync.WaitGroup
	for i := range results {
		body := completionBody(t, f.hotpot[i].Q, int64(i), nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = postCompletion(context.Background(), url, body)
		}()
	}
	waitFor(t, "5 requests in the engine", func() bool {
		st := ps.Stats()
		return st.Running+st.Waiting == 5
	})
	// The first step admitted 1 or 2 (whatever had arrived); every
	// sequence needs at least 4 steps, so after one step 2 run.
	if ps.Stats().Running < 2 {
		step <- struct{}{}
	}
	waitFor(t, "2 running and 3 waiting", func() bool {
		st := ps.Stats()
		return st.Running == 2 && st.Waiting == 3
	})
	m := metricsText(t, url)
	for _, want := range []string{
		`vllm:num_requests_running{model_name="` + testBase + `"} 2`,
		`vllm:num_requests_waiting{model_name="` + testBase + `"} 3`,
		"# TYPE hindsearch_sim_busy_seconds_total counter",
		`hindsearch_sim_busy_seconds_total{model_name="` + testBase + `"} `,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q:\n%s", want, m)
		}
	}
	release()
	wg.Wait()
	var steps int
	for i, r := range results {
		if r.err != nil || r.status != http.StatusOK {
			t.Fatalf("request %d: %d %v", i, r.status, r.err)
		}
		n, _ := strconv.Atoi(r.header.Get("X-Sim-Decode-Steps"))
		if want := max(r.body.Usage.CompletionTokens, 1) + 3; n != want {
			t.Errorf("request %d: %d decode steps, want %d", i, n, want)
		}
		steps += n
		for _, h := range []string{"X-Sim-Queue-Ms", "X-Sim-Prefill-Ms", "X-Sim-Decode-Ms"} {
			if v := headerFloat(t, r.header, h); v < 0 {
				t.Errorf("request %d: %s = %v", i, h, v)
			}
		}
	}
	st := ps.Stats()
	if st.Running != 0 || st.Waiting != 0 || st.Requests != 5 || st.Tokens != int64(steps) {
		t.Errorf("stats after all completed: %+v (want %d tokens)", st, steps)
	}
	// Two at a time: at least half the decode work in steps.
	if st.DecodeSteps < int64((steps+1)/2) {
		t.Errorf("%d decode steps for %d sequence-steps at capacity 2", st.DecodeSteps, steps)
	}
	if !(st.BusySeconds >= float64(st.DecodeSteps)*time.Millisecond.Seconds()) {
		t.Errorf("busy %.4fs < %d steps of 1ms", st.BusySeconds, st.DecodeSteps)
	}
	if m := metricsText(t, url); !strings.Contains(m, `vllm:num_requests_waiting{model_name="`+testBase+`"} 0`) {
		t.Errorf("waiting gauge not 0 after completion:\n%s", m)
	}
}

// TestEngineDecodeAccounting checks that a completion of n tokens takes n
// decode steps (plus its think tokens), that a scoring request is one step,
// and that the prefill is charged in the admitting step.
func TestEngineDecodeAccounting(t *testing.T) {
	f := getFixture(t)
	const step = 2 * time.Millisecond
	ps, url := newTimedPolicy(t, Latency{DecodeStep: step, PrefillPerToken: 100 * time.Microsecond, ThinkTokens: 4, ThinkSigma: 0})
	body := completionBody(t, f.hotpot[0].Q, 7, nil)
	r := postCompletion(context.Background(), url, body)
	if r.err != nil || r.status != http.StatusOK {
		t.Fatalf("completion: %d %v", r.status, r.err)
	}
	n := r.body.Usage.CompletionTokens
	if n < 1 || len(r.body.Choices) != 1 {
		t.Fatalf("completion of %d tokens, %d choices", n, len(r.body.Choices))
	}
	st := ps.Stats()
	if st.DecodeSteps < int64(n) || st.DecodeSteps != int64(n+4) || st.Tokens != int64(n+4) {
		t.Errorf("%d tokens (+4 think) took %d decode steps, %d tokens decoded", n, st.DecodeSteps, st.Tokens)
	}
	if got := r.header.Get("X-Sim-Think-Tokens"); got != "4" {
		t.Errorf("think tokens %q, want 4 (sigma 0)", got)
	}
	// The admitting step charges every prompt token: at least
	// prompt*100us + one step.
	prompt := r.body.Usage.PromptTokens
	minPrefill := (time.Duration(prompt)*100*time.Microsecond + step).Seconds() * 1000
	if p := headerFloat(t, r.header, "X-Sim-Prefill-Ms"); p < minPrefill {
		t.Errorf("prefill %.3f ms < %.3f ms for %d prompt tokens", p, minPrefill, prompt)
	}
	if d := headerFloat(t, r.header, "X-Sim-Decode-Ms"); d < float64(n+4-1)*step.Seconds()*1000 {
		t.Errorf("decode %.3f ms for %d more steps of %v", d, n+4-1, step)
	}
	if !(st.BusySeconds >= float64(st.DecodeSteps)*step.Seconds()) {
		t.Errorf("busy %.4fs < %d steps of %v", st.BusySeconds, st.DecodeSteps, step)
	}

	// A scoring request (prompt logprobs, max_tokens 1): prefill and one
	// decoded token, no think tokens.
	score := completionBody(t, f.hotpot[0].Q, 7, map[string]any{"max_tokens": 1, "prompt_logprobs": 0})
	r = postCompletion(context.Background(), url, score)
	if r.err != nil || r.status != http.StatusOK {
		t.Fatalf("scoring: %d %v", r.status, r.err)
	}
	if r.header.Get("X-Sim-Decode-Steps") != "1" || r.header.Get("X-Sim-Think-Tokens") != "0" {
		t.Errorf("scoring request: %s steps, %s think tokens; want 1, 0", r.header.Get("X-Sim-Decode-Steps"), r.header.Get("X-Sim-Think-Tokens"))
	}
	if st2 := ps.Stats(); st2.DecodeSteps != st.DecodeSteps+1 || st2.Requests != 2 {
		t.Errorf("scoring request: steps %d -> %d, requests %d", st.DecodeSteps, st2.DecodeSteps, st2.Requests)
	}
}

// TestEngineBusyOnlyWhileWorking checks that busy time grows with work and
// not while the replica is idle.
func TestEngineBusyOnlyWhileWorking(t *testing.T) {
	f := getFixture(t)
	ps, url := newTimedPolicy(t, Latency{DecodeStep: time.Millisecond, DecodePerSeq: 500 * time.Microsecond})
	if st := ps.Stats(); st.BusySeconds != 0 || st.DecodeSteps != 0 {
		t.Errorf("fresh replica: %+v", st)
	}
	time.Sleep(20 * time.Millisecond)
	if st := ps.Stats(); st.BusySeconds != 0 {
		t.Errorf("busy %v before any request", st.BusySeconds)
	}
	r := postCompletion(context.Background(), url, completionBody(t, f.hotpot[1].Q, 3, nil))
	if r.err != nil || r.status != http.StatusOK {
		t.Fatalf("completion: %d %v", r.status, r.err)
	}
	s1 := ps.Stats()
	if !(s1.BusySeconds >= float64(s1.DecodeSteps)*1.5e-3) || s1.DecodeSteps == 0 {
		t.Errorf("after one request: %+v", s1)
	}
	time.Sleep(30 * time.Millisecond)
	if s2 := ps.Stats(); s2.BusySeconds != s1.BusySeconds || s2.DecodeSteps != s1.DecodeSteps {
		t.Errorf("idle replica's counters moved: %+v -> %+v", s1, s2)
	}
}

// TestThinkTokens checks the hidden decode steps: deterministic per seed,
// lognormal with the configured mean, none when off.
func TestThinkTokens(t *testing.T) {
	seed := func(v int64) *int64 { return &v }
	if thinkTokens(0, 1, seed(1)) != 0 || thinkTokens(12.4, 0, seed(1)) != 12 {
		t.Error("think tokens off or without spread")
	}
	sum, distinct := 0.0, map[int]bool{}
	for i := int64(0); i < 4000; i++ {
		a, b := thinkTokens(50, 1, seed(i)), thinkTokens(50, 1, seed(i))
		if a != b || a < 0 {
			t.Fatalf("seed %d: %d then %d", i, a, b)
		}
		sum += float64(a)
		distinct[a] = true
	}
	if m := sum / 4000; math.Abs(m-50) > 5 {
		t.Errorf("mean think tokens %.2f, want about 50", m)
	}
	if len(distinct) < 50 {
		t.Errorf("only %d distinct draws", len(distinct))
	}

	// Over HTTP: the same seed gives the same count.
	f := getFixture(t)
	_, url := newTimedPolicy(t, Latency{ThinkTokens: 20, ThinkSigma: 1})
	got := map[int64]string{}
	for _, s := range []int64{5, 6, 5} {
		r := postCompletion(context.Background(), url, completionBody(t, f.hotpot[2].Q, s, nil))
		if r.err != nil || r.status != http.StatusOK {
			t.Fatalf("completion: %d %v", r.status, r.err)
		}
		h := r.header.Get("X-Sim-Think-Tokens")
		if want := strconv.Itoa(thinkTokens(20, 1, seed(s))); h != want {
			t.Errorf("seed %d: %s think tokens, want %s", s, h, want)
		}
		if prev, ok := got[s]; ok && prev != h {
			t.Errorf("seed %d: %s then %s think tokens", s, prev, h)
		}
		got[s] = h
	}
}

// TestZeroLatencyBypassesEngine checks that without policy timing no engine
// (and no goroutine) exists and completions answer as before.
func TestZeroLatencyBypassesEngine(t *testing.T) {
	f := getFixture(t)
	for _, l := range []Latency{{}, {Judge: time.Second, TrainerStep: time.Second, RetrieverBatch: time.Second}} {
		before := runtime.NumGoroutine()
		ps := NewPolicyServer(f.model, testBase)
		ps.SetLatency(l)
		if ps.eng != nil {
			t.Fatalf("latency %+v started an engine", l)
		}
		if n := runtime.NumGoroutine(); n > before {
			t.Errorf("%d goroutines after SetLatency, %d before", n, before)
		}
		srv := httptest.NewServer(ps.Handler())
		r := postCompletion(context.Background(), srv.URL, completionBody(t, f.hotpot[0].Q, 1, nil))
		srv.Close()
		ps.Close()
		if r.err != nil || r.status != http.StatusOK {
			t.Fatalf("completion: %d %v", r.status, r.err)
		}
		if h := r.header.Get("X-Sim-Queue-Ms"); h != "" {
			t.Errorf("bypassed request has X-Sim-Queue-Ms %q", h)
		}
		st := ps.Stats()
		if st.Requests != 1 || st.Tokens != int64(r.body.Usage.CompletionTokens) || st.DecodeSteps != 0 || st.BusySeconds != 0 || st.Running != 0 {
			t.Errorf("stats %+v", st)
		}
	}
	if !(Latency{Capacity: 1}).engineOn() || !(Latency{DecodePerSeq: 1}).engineOn() || !(Latency{PrefillPerToken: 1}).engineOn() || !(Latency{ThinkTokens: 1}).engineOn() {
		t.Error("a policy timing field does not turn the engine on")
	}
}

// TestEngineCancel checks that a request whose client leaves leaves the
// engine, running or waiting.
func TestEngineCancel(t *testing.T) {
	f := getFixture(t)
	// 100000 hidden steps of 1 ms: the requests run until cancelled.
	ps, url := newTimedPolicy(t, Latency{Capacity: 1, DecodeStep: time.Millisecond, ThinkTokens: 100000, ThinkSigma: 0})
	ctx1, cancel1 := context.WithCancel(context.Background())
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel1()
	defer cancel2()
	errs := make(chan error, 2)
	for i, ctx := range []context.Context{ctx1, ctx2} {
		if i == 1 {
			waitFor(t, "the first request running", func() bool { return ps.Stats().Running == 1 })
		}
		body := completionBody(t, f.hotpot[i].Q, int64(i), nil)
		go func() { errs <- postCompletion(ctx, url, body).err }()
	}
	waitFor(t, "1 running, 1 waiting", func() bool { st := ps.Stats(); return st.Running == 1 && st.Waiting == 1 })
	cancel2() // the waiting one
	waitFor(t, "the waiting request to leave", func() bool { st := ps.Stats(); return st.Running == 1 && st.Waiting == 0 })
	cancel1() // the running one
	waitFor(t, "the running request to leave", func() bool { st := ps.Stats(); return st.Running == 0 && st.Waiting == 0 })
	for range 2 {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled request: %v", err)
		}
	}
	// Idle again: the step counter stops. A step already under way when
	// the last request left may still be counted (a loaded machine can
	// deschedule the engine mid-step), so settle first; a busy engine
	// would take about 20 steps in the 20 ms below.
	time.Sleep(5 * time.Millisecond)
	s1 := ps.Stats()
	time.Sleep(20 * time.Millisecond)
	if s2 := ps.Stats(); s2.DecodeSteps > s1.DecodeSteps+1 {
		t.Errorf("engine kept stepping after every request left: %d -> %d", s1.DecodeSteps, s2.DecodeSteps)
	}
}

// TestEngineClose checks that Close stops the engine goroutine, answers a
// request in flight 503 and refuses later ones.
func TestEngineClose(t *testing.T) {
	f := getFixture(t)
	before := runtime.NumGoroutine()
	ps := NewPolicyServer(f.model, testBase)
	ps.SetLatency(Latency{DecodeStep: time.Millisecond, ThinkTokens: 100000, ThinkSigma: 0})
	srv := httptest.NewServer(ps.Handler())
	res := make(chan timedResult, 1)
	body := completionBody(t, f.hotpot[0].Q, 1, nil)
	go func() { res <- postCompletion(context.Background(), srv.URL, body) }()
	waitFor(t, "the request running", func() bool { return ps.Stats().Running == 1 })
	ps.Close()
	if r := <-res; r.err != nil || r.status != http.StatusServiceUnavailable {
		t.Errorf("request in flight at Close: %d %v, want 503", r.status, r.err)
	}
	if r := postCompletion(context.Background(), srv.URL, body); r.err != nil || r.status != http.StatusServiceUnavailable {
		t.Errorf("request after Close: %d %v, want 503", r.status, r.err)
	}
	ps.Close() // twice is harmless
	srv.Close()
	http.DefaultClient.CloseIdleConnections()
	waitFor(t, "the goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}

// TestStartLatency checks that Start applies the latency to every role and
// that Servers.Close stops the engines.
func TestStartLatency(t *testing.T) {
	f := getFixture(t)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	before := runtime.NumGoroutine()
	const judgeDelay = 30 * time.Millisecond
	s, err := Start(Config{BaseModel: testBase, JudgeModel: "judge", CheckpointsDir: t.TempDir(), Corpus: f.corpus[:50],
		PolicyReplicas: 2, Judge: true, Trainer: true,
		Latency: Latency{Capacity: 4, DecodeStep: time.Millisecond, Judge: judgeDelay, TrainerPerDatum: 7 * time.Millisecond, TrainerStep: 9 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range s.Policies {
		if p.eng == nil || p.eng.lat.Capacity != 4 {
			t.Errorf("policy replica without the engine")
		}
	}
	if s.JudgeSrv.Delay != judgeDelay || s.Trainer.DatumDelay != 7*time.Millisecond || s.Trainer.StepDelay != 9*time.Millisecond {
		t.Errorf("judge %v, trainer %v/%v", s.JudgeSrv.Delay, s.Trainer.DatumDelay, s.Trainer.StepDelay)
	}
	for _, u := range s.PolicyURLs {
		body := completionBody(t, f.hotpot[0].Q, 1, nil)
		resp, err := client.Post(u+"/v1/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Sim-Decode-Steps") == "" {
			t.Errorf("%s: %d, headers %v", u, resp.StatusCode, resp.Header)
		}
	}
	t0 := time.Now()
	for range 2 {
		resp, err := client.Post(s.JudgeURL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"judge","messages":[{"role":"user","content":"Question: who?\nTrajectory: none"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("judge: %d", resp.StatusCode)
		}
	}
	if el := time.Since(t0); el < 2*judgeDelay || s.JudgeSrv.Calls() != 2 {
		t.Errorf("2 judge calls took %v (at least %v), counted %d", el, 2*judgeDelay, s.JudgeSrv.Calls())
	}
	s.Close()
	waitFor(t, "the goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}

// TestJudgeDelayCancelled checks that a judge request whose client leaves
// during the delay is dropped.
func TestJudgeDelayCancelled(t *testing.T) {
	js := NewJudgeServer("judge", "", nil)
	js.Delay = time.Hour
	srv := httptest.NewServer(js.Handler())
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"judge","messages":[{"role":"user","content":"Question: who?"}]}`))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	waitFor(t, "the judge call", func() bool { return js.Calls() == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled judge call: %v", err)
	}
	// srv.Close waits for the handler: it must have returned.
}

// TestDelayedRetriever checks the retriever delay: counts calls and
// queries, waits at least batch+perQuery*n, passes the body on intact and
// other routes straight through.
func TestDelayedRetriever(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	inner := http.NewServeMux()
	inner.HandleFunc("POST /retrieve", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		w.Write([]byte(`{"result":[]}`))
	})
	inner.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	const batch, perQuery = 10 * time.Millisecond, 5 * time.Millisecond
	d := NewDelayedRetriever(inner, batch, perQuery)
	srv := httptest.NewServer(d)
	defer srv.Close()
	body := `{"queries":["a","b","c"],"topk":3}`
	t0 := time.Now()
	resp, err := http.Post(srv.URL+"/retrieve", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if el := time.Since(t0); el < batch+3*perQuery || resp.StatusCode != 200 {
		t.Errorf("3-query call: %d after %v, want at least %v", resp.StatusCode, el, batch+3*perQuery)
	}
	resp, err = http.Post(srv.URL+"/retrieve", "application/json", strings.NewReader(`{"queries":["x"]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = http.Get(srv.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if calls, queries := d.Stats(); calls != 2 || queries != 4 {
		t.Errorf("stats: %d calls, %d queries; want 2, 4", calls, queries)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 2 || bodies[0] != body {
		t.Errorf("bodies passed on: %q", bodies)
	}
	var _ http.Handler = DelayRetriever(inner, 0, 0)
}

// TestLatencyFromRecipe checks the conversion of the sim.* keys and their
// defaults and validation.
func TestLatencyFromRecipe(t *testing.T) {
	def := recipes.Defaults()
	if l := LatencyFromRecipe(def.Sim); l.engineOn() || l != (Latency{ThinkSigma: 1, PrefixCaching: true}) {
		t.Errorf("default recipe latency %+v, want instant with think_sigma 1 and prefix caching", l)
	}
	s := recipes.Sim{Capacity: 8, DecodeMS: 12.5, DecodePerSeqMS: 0.25, PrefillUSPerToken: 40, ThinkTokens: 100, ThinkSigma: 0.5,
		JudgeMS: 300, TrainerDatumMS: 20, TrainerStepMS: 150, RetrieverBatchMS: 5, RetrieverQueryMS: 1.5}
	want := Latency{Capacity: 8, DecodeStep: 12500 * time.Microsecond, DecodePerSeq: 250 * time.Microsecond,
		PrefillPerToken: 40 * time.Microsecond, ThinkTokens: 100, ThinkSigma: 0.5, Judge: 300 * time.Millisecond,
		TrainerPerDatum: 20 * time.Millisecond, TrainerStep: 150 * time.Millisecond, RetrieverBatch: 5 * time.Millisecond,
		RetrieverQuery: 1500 * time.Microsecond}
	if got := LatencyFromRecipe(s); got != want {
		t.Errorf("LatencyFromRecipe = %+v, want %+v", got, want)
	}
	r := recipes.Defaults()
	r.Sim = recipes.Sim{Epsilon: 1e-6, Capacity: -1, DecodeMS: -1, DecodePerSeqMS: math.NaN(), PrefillUSPerToken: -1, ThinkTokens: -1,
		ThinkSigma: -1, JudgeMS: -1, TrainerDatumMS: -1, TrainerStepMS: -1, RetrieverBatchMS: -1, RetrieverQueryMS: -1}
	err := r.Validate()
	if err == nil {
		t.Fatal("negative sim timings validated")
	}
	for _, k := range []string{"sim.capacity", "sim.decode_ms", "sim.decode_per_seq_ms", "sim.prefill_us_per_token", "sim.think_tokens",
		"sim.think_sigma", "sim.judge_ms", "sim.trainer_datum_ms", "sim.trainer_step_ms", "sim.retriever_batch_ms", "sim.retriever_query_ms"} {
		if !strings.Contains(err.Error(), k) {
			t.Errorf("validation does not name %s: %v", k, err)
		}
	}
}

func TestPrefixCache(t *testing.T) {
	c := newPrefixCache(3)
	a := make([]int, 40)
	for i := range a {
		a[i] = i
	}
	if n := c.cached(a); n != 0 {
		t.Fatalf("empty cache: %d cached", n)
	}
	c.insert(a[:35]) // two full blocks
	if n := c.cached(a); n != 32 {
		t.Fatalf("%d cached, want 32 (whole blocks of the inserted prefix)", n)
	}
	b := append([]int{999}, a[1:]...)
	if n := c.cached(b); n != 0 {
		t.Fatalf("a different first token shares no block: %d", n)
	}
	// Past the limit the oldest blocks go.
	c.insert(b)
	if n := c.cached(a); n != 0 {
		t.Fatalf("evicted blocks still cached: %d", n)
	}
}
