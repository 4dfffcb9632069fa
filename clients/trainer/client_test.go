package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/internal/fake"
	"github.com/hindsearch/hindsearch/clients/transport"
)

const apiKey = "tml-secret-key-0123456789"

type canned struct {
	status int
	body   string
}

// tinker is a fake Tinker server: every training POST returns a new
// request id whose result comes from result; retrieve_future first serves
// the canned answers of polls, in order.
type tinker struct {
	*fake.Server
	mu      sync.Mutex
	n       int
	results map[string]any
	polls   []canned
	result  func(route string, body map[string]any) any
}

func newTinker(t *testing.T) *tinker {
	tk := &tinker{Server: fake.New(t), results: map[string]any{}}
	tk.result = func(route string, body map[string]any) any {
		switch route {
		case "create_model":
			return map[string]any{"model_id": fmt.Sprintf("model-%v", body["model_seq_id"])}
		case "forward_backward":
			return map[string]any{
				"loss_fn_outputs": []any{map[string]any{"logprobs": map[string]any{"data": []any{-0.5, -1.5}, "dtype": "float32", "shape": []int{2}}}},
				"metrics":         map[string]any{"loss:sum": 2.5},
			}
		case "optim_step":
			return map[string]any{"metrics": map[string]any{"grad_norm": 0.75}}
		case "save_weights_for_sampler":
			if _, ok := body["sampling_session_seq_id"]; ok {
				// The SDK's ephemeral save: no path, a sampling session.
				return map[string]any{"path": nil, "sampling_session_id": "sampling_e1", "type": "save_weights_for_sampler"}
			}
			return map[string]any{"path": "tinker://" + body["model_id"].(string) + "/sampler_weights/" + body["path"].(string)}
		}
		return map[string]any{}
	}
	for _, route := range []string{"create_model", "forward_backward", "optim_step", "save_weights_for_sampler"} {
		tk.Handle("/api/v1/"+route, func(w http.ResponseWriter, _ *http.Request, raw []byte) {
			var body map[string]any
			_ = json.Unmarshal(raw, &body)
			tk.mu.Lock()
			tk.n++
			id := fmt.Sprintf("req-%d", tk.n)
			tk.results[id] = tk.result(route, body)
			tk.mu.Unlock()
			fake.WriteJSON(w, 200, map[string]any{"request_id": id, "model_id": body["model_id"]})
		})
	}
	tk.Handle("/api/v1/retrieve_future", func(w http.ResponseWriter, _ *http.Request, raw []byte) {
		var body struct {
			RequestID string `json:"request_id"`
		}
		_ = json.Unmarshal(raw, &body)
		tk.mu.Lock()
		if len(tk.polls) > 0 {
			p := tk.polls[0]
			tk.polls = tk.polls[1:]
			tk.mu.Unlock()
			w.WriteHeader(p.status)
			_, _ = w.Write([]byte(p.body))
			return
		}
		res, ok := tk.results[body.RequestID]
		tk.mu.Unlock()
		if !ok {
			fake.WriteJSON(w, 404, map[string]any{"detail": "unknown request"})
			return
		}
		fake.WriteJSON(w, 200, res)
	})
	tk.Handle("/api/v1/create_session", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		fake.WriteJSON(w, 200, map[string]any{"session_id": "sess-1", "type": "create_session"})
	})
	tk.Handle("/api/v1/session_heartbeat", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		fake.WriteJSON(w, 200, map[string]any{"type": "session_heartbeat"})
	})
	return tk
}

func (tk *tinker) queuePolls(p ...canned) {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	tk.polls = append(tk.polls, p...)
}

func newClient(t *testing.T, tk *tinker, key string) *Client {
	t.Helper()
	o := transport.DefaultOptions("trainer", tk.URL)
	o.Timeout = 2 * time.Second
	o.RetryWaitMin, o.RetryWaitMax = time.Millisecond, 2*time.Millisecond
	c, err := New(o, key)
	if err != nil {
		t.Fatal(err)
	}
	c.HeartbeatInterval = 5 * time.Millisecond
	c.PollWaitMin, c.PollWaitMax = time.Millisecond, 4*time.Millisecond
	t.Cleanup(c.Close)
	return c
}

func bodies(tk *tinker, route string) []fake.Request { return tk.Requests("/api/v1/" + route) }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSessionHeartbeat(t *testing.T) {
	tk := newTinker(t)
	c := newClient(t, tk, apiKey)
	s, err := c.StartSession(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != "sess-1" {
		t.Fatalf("id %q", s.ID)
	}
	r := bodies(tk, "create_session")[0]
	fake.AssertJSON(t, r.Body, `{"tags":[],"user_metadata":{},"sdk_version":"hindsearch-0.1","type":"create_session"}`)
	if r.Header.Get("X-API-Key") != apiKey {
		t.Fatalf("header %q", r.Header.Get("X-API-Key"))
	}
	waitFor(t, "heartbeats", func() bool { return len(bodies(tk, "session_heartbeat")) >= 3 })
	s.Close()
	// A heartbeat sent just before Close may reach the server just after
	// it returned: let those land, then no more may come.
	time.Sleep(30 * time.Millisecond)
	n := len(bodies(tk, "session_heartbeat"))
	for _, r := range bodies(tk, "session_heartbeat") {
		fake.AssertJSON(t, r.Body, `{"session_id":"sess-1","type":"session_heartbeat"}`)
	}
	time.Sleep(100 * time.Millisecond)
	if m := len(bodies(tk, "session_heartbeat")); m != n {
		t.Fatalf("heartbeats went on after close: %d then %d", n, m)
	}
	s.Close() // idempotent
}

func TestHeartbeatStopsWithContext(t *testing.T) {
	tk := newTinker(t)
	c := newClient(t, tk, "")
	ctx, cancel := context.WithCancel(context.Background())
	s, err := c.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a heartbeat", func() bool { return len(bodies(tk, "session_heartbeat")) >= 1 })
	cancel()
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("close did not return")
	}
	n := len(bodies(tk, "session_heartbeat"))
	time.Sleep(20 * time.Millisecond)
	if m := len(bodies(tk, "session_heartbeat")); m != n {
		t.Fatalf("heartbeats after cancel: %d then %d", n, m)
	}
	if _, ok := bodies(tk, "create_session")[0].Header["X-Api-Key"]; ok {
		t.Fatal("X-API-Key sent without a key")
	}
}

func TestCapabilitiesAndHealthz(t *testing.T) {
	tk := newTinker(t)
	tk.HandleJSON("/api/v1/get_server_capabilities", 200, map[string]any{"supported_models": []any{
		map[string]any{"model_name": "Qwen/Qwen3-4B"}, map[string]any{"model_name": "meta-llama/Llama-3.2-3B"},
	}})
	tk.HandleJSON("/api/v1/healthz", 200, map[string]any{"status": "ok"})
	c := newClient(t, tk, apiKey)
	got, err := c.Capabilities(context.Background())
	if err != nil || strings.Join(got, ",") != "Qwen/Qwen3-4B,meta-llama/Llama-3.2-3B" {
		t.Fatalf("%v %v", got, err)
	}
	if err := c.Healthz(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := tk.Requests("/api/v1/healthz"); r[0].Method != http.MethodGet {
		t.Fatal(r[0].Method)
	}
}

func TestCreateModel(t *testing.T) {
	tk := newTinker(t)
	c := newClient(t, tk, apiKey)
	s, err := c.StartSession(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 2 {
		id, err := c.CreateModel(context.Background(), s, "Qwen/Qwen3-4B", 32, 7)
		if err != nil {
			t.Fatal(err)
		}
		if id != fmt.Sprintf("model-%d", i) {
			t.Fatalf("id %q", id)
		}
		fake.AssertJSON(t, bodies(tk, "create_model")[i].Body, fmt.Sprintf(
			`{"session_id":"sess-1","model_seq_id":%d,"base_model":"Qwen/Qwen3-4B","lora_config":{"rank":32,"seed":7},"type":"create_model"}`, i))
	}
	fake.AssertJSON(t, bodies(tk, "retrieve_future")[0].Body, `{"request_id":"req-1"}`)
	if _, err := c.CreateModel(context.Background(), nil, "m", 1, 7); err == nil {
		t.Fatal("nil session accepted")
	}
}

func testDatum() Datum {
	return Datum{
		ModelInput: ModelInput{Chunks: []Chunk{{Type: "encoded_text", Tokens: []int{11, 12, 13}}}},
		LossFnInputs: map[string]TensorData{
			"target_tokens": Int64Tensor([]int64{12, 13, 14}),
			"logprobs":      Float32Tensor([]float32{0, -0.5, -1.25}),
			"advantages":    Float32Tensor([]float32{0, 1.5, 1.5}),
			"weights":       Float32Tensor([]float32{0, 1, 1}),
		},
	}
}

const datumJSON = `{"model_input":{"chunks":[{"type":"encoded_text","tokens":[11,12,13]}]},"loss_fn_inputs":{
	"target_tokens":{"data":[12,13,14],"dtype":"int64","shape":[3]},
	"logprobs":{"data":[0,-0.5,-1.25],"dtype":"float32","shape":[3]},
	"advantages":{"data":[0,1.5,1.5],"dtype":"float32","shape":[3]},
	"weights":{"data":[0,1,1],"dtype":"float32","shape":[3]}}}`

var adam = AdamParams{LearningRate: 1e-6, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.01}

const adamJSON = `{"learning_rate":1e-6,"beta1":0.9,"beta2":0.95,"eps":1e-8,"weight_decay":0.01}`

func TestTrainingCalls(t *testing.T) {
	tk := newTinker(t)
	c := newClient(t, tk, apiKey)
	ctx := context.Background()

	fb, err := c.ForwardBackward(ctx, "m1", []Datum{testDatum()}, "importance_sampling", nil)
	if err != nil {
		t.Fatal(err)
	}
	fake.AssertJSON(t, bodies(tk, "forward_backward")[0].Body,
		`{"model_id":"m1","seq_id":1,"forward_backward_input":{"data":[`+datumJSON+`],"loss_fn":"importance_sampling"}}`)
	if fb.Metrics["loss:sum"] != 2.5 || len(fb.LossFnOutputs) != 1 {
		t.Fatalf("%+v", fb)
	}
	lp, err := DecodeFloats(fb.LossFnOutputs[0]["logprobs"])
	if err != nil || len(lp) != 2 || lp[0] != -0.5 || lp[1] != -1.5 {
		t.Fatalf("%v %v", lp, err)
	}

	_, err = c.ForwardBackward(ctx, "m1", []Datum{testDatum(), testDatum()}, "ppo", map[string]float64{"clip_low_threshold": 0.8, "clip_high_threshold": 1.2})
	if err != nil {
		t.Fatal(err)
	}
	fake.AssertJSON(t, bodies(tk, "forward_backward")[1].Body,
		`{"model_id":"m1","seq_id":2,"forward_backward_input":{"data":[`+datumJSON+`,`+datumJSON+`],"loss_fn":"ppo",
		"loss_fn_config":{"clip_low_threshold":0.8,"clip_high_threshold":1.2}}}`)

	m, err := c.OptimStep(ctx, "m1", adam)
	if err != nil || m["grad_norm"] != 0.75 {
		t.Fatalf("%v %v", m, err)
	}
	fake.AssertJSON(t, bodies(tk, "optim_step")[0].Body, `{"model_id":"m1","seq_id":3,"adam_params":`+adamJSON+`,"type":"optim_step"}`)

	p, err := c.SaveWeightsForSampler(ctx, "m1", "step_3-a")
	if err != nil || p != "tinker://m1/sampler_weights/step_3-a" {
		t.Fatalf("%q %v", p, err)
	}
	fake.AssertJSON(t, bodies(tk, "save_weights_for_sampler")[0].Body, `{"model_id":"m1","path":"step_3-a","seq_id":4}`)

	// Another model counts from 1.
	if _, err := c.OptimStep(ctx, "m2", adam); err != nil {
		t.Fatal(err)
	}
	fake.AssertJSON(t, bodies(tk, "optim_step")[1].Body, `{"model_id":"m2","seq_id":1,"adam_params":`+adamJSON+`,"type":"optim_step"}`)
	if c.LastSeqID("m1") != 4 || c.LastSeqID("m2") != 1 {
		t.Fatal("LastSeqID")
	}
	c.ResumeModel("m3", 41)
	if _, err := c.OptimStep(ctx, "m3", adam); err != nil {
		t.Fatal(err)
	}
	fake.AssertJSON(t, bodies(tk, "optim_step")[2].Body, `{"model_id":"m3","seq_id":42,"adam_params":`+adamJSON+`,"type":"optim_step"}`)
	for _, r := range tk.Requests("") {
		if r.Header.Get("X-API-Key") != apiKey {
			t.Fatalf("%s without key", r.Path)
		}
	}
}

func TestBadInputsSendNothing(t *testing.T) {
	tk := newTinker(t)
	c := newClient(t, tk, apiKey)
	for _, name := range []string{"", "a/b", "../x", "a b", "ü"} {
		if _, err := c.SaveWeightsForSampler(context.Background(), "m1", name); err == nil {
			t.Fatalf("name %q accepted", name)
		}
	}
	d := testDatum()
	d.LossFnInputs["weights"] = Float32Tensor([]float32{1, 1})
	_, err := c.ForwardBackward(context.Background(), "m1", []Datum{d}, "importance_sampling", nil)
	if err == nil || !strings.Contains(err.Error(), "datum 0: tensor weights") {
		t.Fatalf("err %v", err)
	}
	if n := len(tk.Requests("")); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
	if c.LastSeqID("m1") != 0 {
		t.Fatal("seq_id used by a rejected call")
	}
}

func TestRetried503ReusesSeqID(t *testing.T) {
	tk := newTinker(t)
	c := newClient(t, tk, apiKey)
	if _, err := c.OptimStep(context.Background(), "m1", adam); err != nil {
		t.Fatal(err)
	}
	tk.FailNext("/api/v1/forward_backward", 2, 503, nil, "busy")
	if _, err := c.ForwardBackward(context.Background(), "m1", []Datum{testDatum()}, "importance_sampling", nil); err != nil {
		t.Fatal(err)
	}
	reqs := bodies(tk, "forward_backward")
	if len(reqs) != 3 {
		t.Fatalf("%d posts", len(reqs))
	}
	for _, r := range reqs {
		fake.AssertJSON(t, r.Body, `{"model_id":"m1","seq_id":2,"forward_backward_input":{"data":[`+datumJSON+`],"loss_fn":"importance_sampling"}}`)
	}
	if _, err := c.OptimStep(context.Background(), "m1", adam); err != nil {
		t.Fatal(err)
	}
	fake.AssertJSON(t, bodies(tk, "optim_step")[1].Body, `{"model_id":"m1","seq_id":3,"adam_params":`+adamJSON+`,"type":"optim_step"}`)
}

func TestSeqIDsInOrderUnderConcurrency(t *testing.T) {
	tk := newTinker(t)
	c := newClient(t, tk, apiKey)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if _, err := c.OptimStep(context.Background(), "m1", adam); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for i, r := range bodies(tk, "optim_step") {
		var b struct {
			SeqID int `json:"seq_id"`
		}
		_ = json.Unmarshal(r.Body, &b)
		if b.SeqID != i+1 {
			t.Fatalf("post %d has seq_id %d", i, b.SeqID)
		}
	}
}

func TestFutureTryAgainAnd408(t *testing.T) {
	tk := newTinker(t)
	c := newClient(t, tk, apiKey)
	tk.queuePolls(
		canned{200, `{"type":"try_again","request_id":"req-1","queue_state":"active"}`},
		canned{200, `{"type":"try_again","request_id":"req-1"}`},
		// More 408s than the transport retries: the client polls again.
		canned{408, `{"detail":"timeout"}`}, canned{408, ""}, canned{408, ""}, canned{408, ""}, canned{408, ""}, canned{408, ""},
		canned{200, `{"type":"try_again"}`},
	)
	m, err := c.OptimStep(context.Background(), "m1", adam)
	if err != nil || m["grad_norm"] != 0.75 {
		t.Fatalf("%v %v", m, err)
	}
	polls := bodies(tk, "retrieve_future")
	if len(polls) != 10 {
		t.Fatalf("%d polls", len(polls))
	}
	for _, p := range polls {
		fake.AssertJSON(t, p.Body, `{"request_id":"req-1"}`)
	}
	if len(bodies(tk, "optim_step")) != 1 {
		t.Fatal("resubmitted without a 410")
	}
}

func TestFutureExpiredResubmits(t *testing.T) {
	tk := newTinker(t)
	c := newClient(t, tk, apiKey)
	tk.queuePolls(canned{410, `{"detail":"expired"}`}, canned{200, `{"type":"try_again"}`}, canned{410, ""})
	p, err := c.SaveWeightsForSampler(context.Background(), "m1", "s1")
	if err != nil || p != "tinker://m1/sampler_weights/s1" {
		t.Fatalf("%q %v", p, err)
	}
	posts := bodies(tk, "save_weights_for_sampler")
	if len(posts) != 3 {
		t.Fatalf("%d posts", len(posts))
	}
	for _, r := range posts {
		fake.AssertJSON(t, r.Body, `{"model_id":"m1","path":"s1","seq_id":1}`)
	}
	var ids []string
	for _, r := range bodies(tk, "retrieve_future") {
		var b struct {
			RequestID string `json:"request_id"`
		}
		_ = json.Unmarshal(r.Body, &b)
		ids = append(ids, b.RequestID)
	}
	if strings.Join(ids, ",") != "req-1,req-2,req-2,req-3" {
		t.Fatalf("polls %v", ids)
	}

	// Bounded.
	c.MaxResubmits = 2
	tk.queuePolls(canned{410, ""}, canned{410, ""}, canned{410, ""})
	_, err = c.OptimStep(context.Background(), "m1", adam)
	if err == nil || !strings.Contains(err.Error(), "expired after 2 resubmissions") {
		t.Fatalf("err %v", err)
	}
}

func TestFutureErrors(t *testing.T) {
	tk := newTinker(t)
	c := newClient(t, tk, apiKey)
	tk.queuePolls(canned{200, `{"error":"shape mismatch in datum 3","category":"user"}`})
	_, err := c.ForwardBackward(context.Background(), "m1", []Datum{testDatum()}, "importance_sampling", nil)
	var re *RequestError
	if !errors.As(err, &re) || re.Category != "user" || re.Message != "shape mismatch in datum 3" || re.Op != "forward_backward" || re.RequestID != "req-1" {
		t.Fatalf("err %v", err)
	}
	if err.Error() != "trainer forward_backward: request req-1 failed (user): shape mismatch in datum 3" {
		t.Fatalf("message %q", err.Error())
	}
	tk.queuePolls(canned{400, `{"detail":"Qwen2 is not supported"}`})
	_, err = c.CreateModel(context.Background(), &Session{ID: "sess-9"}, "Qwen/Qwen2.5-3B", 8, 7)
	if !errors.As(err, &re) || re.Message != "Qwen2 is not supported" || re.Category != "" {
		t.Fatalf("err %v", err)
	}
	tk.queuePolls(canned{500, "internal " + apiKey}, canned{500, ""}, canned{500, ""}, canned{500, ""})
	_, err = c.OptimStep(context.Background(), "m1", adam)
	if !transport.IsStatus(err, 500) || strings.Contains(err.Error(), apiKey) {
		t.Fatalf("err %v", err)
	}
	// A cancelled context ends polling.
	tk.mu.Lock()
	tk.polls = nil
	for range 1000 {
		tk.polls = append(tk.polls, canned{200, `{"type":"try_again"}`})
	}
	tk.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err = c.OptimStep(ctx, "m1", adam)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
}

func TestDecodeFloats(t *testing.T) {
	var td TensorData
	if err := json.Unmarshal([]byte(`{"data":[1,-2.5,3e-3],"dtype":"float32","shape":[3]}`), &td); err != nil {
		t.Fatal(err)
	}
	got, err := DecodeFloats(td)
	if err != nil || len(got) != 3 || got[0] != 1 || got[1] != -2.5 || got[2] != 0.003 {
		t.Fatalf("%v %v", got, err)
	}
	if got, err := DecodeFloats(Int64Tensor([]int64{4, 5})); err != nil || got[1] != 5 {
		t.Fatalf("%v %v", got, err)
	}
	if got, err := DecodeFloats(Float32Tensor([]float32{0.5})); err != nil || got[0] != 0.5 {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := DecodeFloats(TensorData{Data: []any{1.0, "x"}}); err == nil {
		t.Fatal("string accepted")
	}
	if _, err := DecodeFloats(TensorData{Data: []any{1.0}, Shape: []int{2}}); err == nil {
		t.Fatal("shape mismatch accepted")
	}
	if _, err := DecodeFloats(TensorData{Data: "x"}); err == nil {
		t.Fatal("string data accepted")
	}
}
