package trainer

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/sim/lm"
)

// newTrainer starts a simulated trainer over httptest.
func newTrainer(t *testing.T, f *fixture) (*Server, apiClient, string) {
	t.Helper()
	return newTrainerBackend(t, f, "", 0)
}

// newTrainerBackend starts a simulated trainer of backend b whose saves
// take stepDelay.
func newTrainerBackend(t *testing.T, f *fixture, b Backend, stepDelay time.Duration) (*Server, apiClient, string) {
	t.Helper()
	ckpt := t.TempDir()
	ts := NewServer(f.model, testBase, ckpt)
	ts.PollWait = 20 * time.Millisecond
	ts.Backend = b
	ts.StepDelay = stepDelay
	t.Cleanup(ts.Close)
	srv := httptest.NewServer(ts.Handler())
	t.Cleanup(srv.Close)
	return ts, apiClient{T: t, Base: srv.URL}, ckpt
}

// trainTrajectory samples a trajectory of a HotpotQA question that
// searches, reads the real retriever's passages and answers.
func trainTrajectory(t *testing.T, f *fixture, qi int) trajectory {
	t.Helper()
	docs := bm25Docs(t)
	for seed := uint64(0); seed < 200; seed++ {
		tr := rollout(f.model, lm.InitialParams(), f.hotpot[qi].Q, "", trainSampling(), rand.New(rand.NewPCG(seed, 5)), 4, docs)
		if len(tr.Queries) >= 1 && tr.Answered {
			return tr
		}
	}
	t.Fatal("no searching trajectory in 200 seeds")
	return trajectory{}
}

// policyLogLik is the trajectory's log-likelihood over its policy tokens.
func policyLogLik(m *lm.Model, params lm.Params, tr trajectory) float64 {
	lps := m.Score(params, tr.IDs)
	s := 0.0
	for _, p := range tr.PolicyPositions() {
		s += lps[p]
	}
	return s
}

func metric(t *testing.T, res map[string]any, name string) float64 {
	t.Helper()
	ms, ok := res["metrics"].(map[string]any)
	if !ok {
		t.Fatalf("no metrics in %v", res)
	}
	v, ok := ms[name].(float64)
	if !ok {
		t.Fatalf("no metric %s in %v", name, ms)
	}
	return v
}

// TestTrainerGradientStepsChangeLikelihood trains fresh models over HTTP
// with one forward_backward and one optim_step on a sampled trajectory and
// checks that a positive advantage makes it more likely and a negative one
// less likely, for the importance-sampling and PPO losses (and that cross
// entropy makes it more likely).
func TestTrainerGradientStepsChangeLikelihood(t *testing.T) {
	f := getFixture(t)
	tr := trainTrajectory(t, f, 7)
	before := policyLogLik(f.model, lm.InitialParams(), tr)
	npol := len(tr.PolicyPositions())
	for k, tc := range []struct {
		loss string
		adv  float64
	}{{"importance_sampling", 1}, {"importance_sampling", -1}, {"ppo", 1}, {"ppo", -1}, {"cross_entropy", 0}} {
		name := fmt.Sprintf("%s/adv=%v", tc.loss, tc.adv)
		// The FSDP backend's forward_backward reports the metrics
		// (skyrl 0.3.0's JAX backend reports none); it holds one model.
		ts, c, _ := newTrainerBackend(t, f, BackendFSDP, 0)
		mid := createModel(c, createSession(c), k)
		d := datum(tr, tc.adv, 0)
		if tc.loss == "cross_entropy" {
			d["loss_fn_inputs"] = map[string]any{"target_tokens": d["loss_fn_inputs"].(map[string]any)["target_tokens"],
				"weights": d["loss_fn_inputs"].(map[string]any)["weights"]}
		}
		res := c.Call("/api/v1/forward_backward", fbBody(mid, 1, tc.loss, nil, d))
		// The returned logprobs are the model's, at the weighted positions.
		outs := res["loss_fn_outputs"].([]any)
		lpOut := outs[0].(map[string]any)["logprobs"].(map[string]any)["data"].([]any)
		score := f.model.Score(lm.InitialParams(), tr.IDs)
		for _, p := range tr.PolicyPositions() {
			if got := lpOut[p-1].(float64); math.Abs(got-score[p]) > 1e-5*(1+math.Abs(score[p])) {
				t.Errorf("%s: returned logprob at %d = %v, Score %v", name, p-1, got, score[p])
			}
		}
		if got := metric(t, res, "clipped:sum"); got != 0 {
			t.Errorf("%s: %v tokens clipped with on-policy logprobs", name, got)
		}
		if got := metric(t, res, "tokens:sum"); got != float64(npol) {
			t.Errorf("%s: tokens:sum %v, want %d", name, got, npol)
		}
		if tc.loss != "cross_entropy" {
			// On policy, ratio 1, FSDP's token sum: loss = -A per token.
			if got := metric(t, res, "loss:sum"); math.Abs(got+tc.adv*float64(npol)) > 1e-4*float64(npol) {
				t.Errorf("%s: loss:sum %v, want %v", name, got, -tc.adv*float64(npol))
			}
		}
		if p, _ := ts.ModelParams(mid); !slices.Equal(p, lm.InitialParams()) {
			t.Errorf("%s: forward_backward changed the parameters", name)
		}
		res = c.Call("/api/v1/optim_step", optimBody(mid, 2, 0.02))
		if g := metric(t, res, "grad_norm"); g <= 0 {
			t.Errorf("%s: grad_norm %v", name, g)
		}
		p, ok := ts.ModelParams(mid)
		if !ok {
			t.Fatalf("%s: no model %s", name, mid)
		}
		after := policyLogLik(f.model, p, tr)
		t.Logf("%s: log-likelihood %.4f -> %.4f", name, before, after)
		switch {
		case tc.adv >= 0 && after <= before+1e-6:
			t.Errorf("%s: trajectory log-likelihood %.6f -> %.6f, want an increase", name, before, after)
		case tc.adv < 0 && after >= before-1e-6:
			t.Errorf("%s: trajectory log-likelihood %.6f -> %.6f, want a decrease", name, before, after)
		}
	}
}

// TestTrainerPPOClips checks that PPO clips the tokens whose importance
// ratio is outside the clip range in the advantage's direction (so they
// contribute no gradient), honours loss_fn_config, and that the
// importance-sampling loss does not clip.
func TestTrainerPPOClips(t *testing.T) {
	f := getFixture(t)
	tr := trainTrajectory(t, f, 12)
	npol := float64(len(tr.PolicyPositions()))
	for k, tc := range []struct {
		loss       string
		adv, shift float64
		cfg        map[string]float64
		clipped    float64
	}{
		{"ppo", 1, -1, nil, npol}, // ratio e > 1.2 with A > 0
		{"ppo", -1, 1, nil, npol}, // ratio 1/e < 0.8 with A < 0
		{"ppo", -1, -1, nil, 0},   // ratio e with A < 0: not clipped
		{"ppo", 1, -1, map[string]float64{"clip_low_threshold": 0.1, "clip_high_threshold": 10}, 0},
		{"importance_sampling", 1, -1, nil, 0},
	} {
		name := fmt.Sprintf("%s adv=%v shift=%v cfg=%v", tc.loss, tc.adv, tc.shift, tc.cfg)
		ts, c, _ := newTrainerBackend(t, f, BackendFSDP, 0) // reports metrics
		mid := createModel(c, createSession(c), k)
		res := c.Call("/api/v1/forward_backward", fbBody(mid, 1, tc.loss, tc.cfg, datum(tr, tc.adv, tc.shift)))
		if got := metric(t, res, "clipped:sum"); got != tc.clipped {
			t.Errorf("%s: clipped:sum %v, want %v", name, got, tc.clipped)
		}
		c.Call("/api/v1/optim_step", optimBody(mid, 2, 0.02))
		p, _ := ts.ModelParams(mid)
		if changed := !slices.Equal(p, lm.InitialParams()); changed != (tc.clipped == 0) {
			t.Errorf("%s: parameters changed = %v, want %v", name, changed, tc.clipped == 0)
		}
	}
}

// TestTrainerImportanceRatio checks that the importance-sampling loss
// weights each token's gradient by its ratio: one batch holds a trajectory
// twice, once with advantage +1 and ratio e^3 (sampled with logprobs 3
// lower) and once with advantage -1 on policy. The ratio-weighted gradient
// is (e^3 - 1) times that of the trajectory's log-likelihood, so it becomes
// more likely; without the ratio the two would cancel. PPO clips the first
// datum (ratio > 1.2 with A > 0), so under PPO it becomes less likely.
func TestTrainerImportanceRatio(t *testing.T) {
	f := getFixture(t)
	ts, c, _ := newTrainer(t, f)
	session := createSession(c)
	tr := trainTrajectory(t, f, 7)
	before := policyLogLik(f.model, lm.InitialParams(), tr)
	for k, tc := range []struct {
		loss string
		up   bool
	}{{"importance_sampling", true}, {"ppo", false}} {
		mid := createModel(c, session, k)
		c.Call("/api/v1/forward_backward", fbBody(mid, 1, tc.loss, nil, datum(tr, 1, -3), datum(tr, -1, 0)))
		res := c.Call("/api/v1/optim_step", optimBody(mid, 2, 0.02))
		if d := metric(t, res, "datums"); d != 2 {
			t.Errorf("%s: optim_step used %v datums, want 2", tc.loss, d)
		}
		p, _ := ts.ModelParams(mid)
		after := policyLogLik(f.model, p, tr)
		if up := after > before+1e-6; up != tc.up || math.Abs(after-before) < 1e-6 {
			t.Errorf("%s: log-likelihood %.6f -> %.6f, want it to go %s", tc.loss, before, after, map[bool]string{true: "up", false: "down"}[tc.up])
		}
	}
}

// TestTrainerSeqIDs checks the seq_id rules: a retry with the same body
// gets the same request, the same seq_id with another body is a conflict,
// a skipped seq_id is refused, and a retried step is not applied twice.
func TestTrainerSeqIDs(t *testing.T) {
	f := getFixture(t)
	ts, c, _ := newTrainer(t, f)
	session := createSession(c)
	mid := createModel(c, session, 0)
	tr := trainTrajectory(t, f, 3)
	body := fbBody(mid, 1, "importance_sampling", nil, datum(tr, 1, 0))
	st, a := c.Post("/api/v1/forward_backward", body)
	if st != http.StatusOK {
		t.Fatalf("forward_backward: %d %v", st, a)
	}
	st, b := c.Post("/api/v1/forward_backward", body)
	if st != http.StatusOK || b["request_id"] != a["request_id"] {
		t.Errorf("retry with the same body: %d %v, want the request %v", st, b, a["request_id"])
	}
	if st, body := c.Post("/api/v1/forward_backward", fbBody(mid, 1, "importance_sampling", nil, datum(tr, 2, 0))); st != http.StatusConflict ||
		body["detail"] != "Training request sequence number was reused" {
		t.Errorf("seq_id 1 reused with another body: %d %v, want SkyRL's 409", st, body)
	}
	if st, body := c.Post("/api/v1/optim_step", optimBody(mid, 3, 0.01)); st != http.StatusBadRequest {
		t.Errorf("seq_id 3 after 1: %d %v, want 400", st, body)
	}
	if st, _ := c.Result(a["request_id"].(string)); st != http.StatusOK {
		t.Fatalf("forward_backward result: %d", st)
	}
	st, o1 := c.Post("/api/v1/optim_step", optimBody(mid, 2, 0.01))
	if st != http.StatusOK {
		t.Fatalf("optim_step seq 2: %d %v", st, o1)
	}
	c.Result(o1["request_id"].(string))
	p1, _ := ts.ModelParams(mid)
	st, o2 := c.Post("/api/v1/optim_step", optimBody(mid, 2, 0.01))
	if st != http.StatusOK || o2["request_id"] != o1["request_id"] {
		t.Errorf("optim_step retry: %d %v, want request %v", st, o2, o1["request_id"])
	}
	c.Result(o2["request_id"].(string))
	if p2, _ := ts.ModelParams(mid); !slices.Equal(p1, p2) {
		t.Errorf("a retried optim_step was applied twice: %v -> %v", p1, p2)
	}
	if slices.Equal(p1, lm.InitialParams()) {
		t.Errorf("optim_step did not change the parameters")
	}
	// An optim_step with no forward_backward since the last one has no
	// gradients to apply.
	res := c.Call("/api/v1/optim_step", optimBody(mid, 3, 0.01))
	if d := metric(t, res, "datums"); d != 0 {
		t.Errorf("optim_step after optim_step used %v datums, want 0", d)
	}
	if p3, _ := ts.ModelParams(mid); !slices.Equal(p1, p3) {
		t.Errorf("an optim_step without gradients changed the parameters: %v -> %v", p1, p3)
	}
	// Other models have their own sequence.
	mid2 := createModel(c, session, 1)
	if st, body := c.Post("/api/v1/optim_step", optimBody(mid2, 1, 0.01)); st != http.StatusOK {
		t.Errorf("seq_id 1 on a second model: %d %v", st, body)
	}
}

// TestTrainerRejectsBadRequests checks the trainer's validation.
func TestTrainerRejectsBadRequests(t *testing.T) {
	f := getFixture(t)
	ts, c, _ := newTrainer(t, f)
	session := createSession(c)
	mid := createModel(c, session, 0)
	tr := trainTrajectory(t, f, 3)
	if st, body := c.Get("/api/v1/healthz"); st != 200 || body["status"] != "ok" {
		t.Errorf("healthz: %d %v", st, body)
	}
	if st, body := c.Get("/api/v1/get_server_capabilities"); st != 200 || !strings.Contains(fmt.Sprint(body), testBase) {
		t.Errorf("capabilities: %d %v", st, body)
	}
	if st, _ := c.Post("/api/v1/session_heartbeat", map[string]any{"session_id": session, "type": "session_heartbeat"}); st != 200 {
		t.Errorf("heartbeat: %d", st)
	}
	if st, _ := c.Post("/api/v1/session_heartbeat", map[string]any{"session_id": "nope", "type": "session_heartbeat"}); st != 404 {
		t.Errorf("heartbeat of an unknown session: %d, want 404", st)
	}
	bad := func(name string, d map[string]any, mut func(map[string]any)) map[string]any {
		raw, _ := json.Marshal(d)
		var cp map[string]any
		_ = json.Unmarshal(raw, &cp)
		mut(cp)
		return cp
	}
	d := datum(tr, 1, 0)
	inputs := func(m map[string]any) map[string]any { return m["loss_fn_inputs"].(map[string]any) }
	cases := []struct {
		name string
		path string
		body any
		want int
	}{
		{"unknown loss", "/api/v1/forward_backward", fbBody(mid, 1, "dpo", nil, d), 400},
		{"short tensor", "/api/v1/forward_backward", fbBody(mid, 1, "ppo", nil, bad("short", d, func(m map[string]any) {
			inputs(m)["weights"] = tensor([]float64{1}, "float32")
		})), 400},
		{"wrong dtype", "/api/v1/forward_backward", fbBody(mid, 1, "ppo", nil, bad("dtype", d, func(m map[string]any) {
			w := inputs(m)["weights"].(map[string]any)
			w["dtype"] = "int64"
		})), 400},
		{"missing advantages", "/api/v1/forward_backward", fbBody(mid, 1, "ppo", nil, bad("adv", d, func(m map[string]any) {
			delete(inputs(m), "advantages")
		})), 400},
		{"unknown input", "/api/v1/forward_backward", fbBody(mid, 1, "ppo", nil, bad("extra", d, func(m map[string]any) {
			inputs(m)["mask"] = inputs(m)["weights"]
		})), 400},
		{"unknown model", "/api/v1/forward_backward", fbBody("sim-model-999", 1, "ppo", nil, d), 404},
		{"negative learning rate", "/api/v1/optim_step", optimBody(mid, 1, -1e-6), 422}, // SkyRL: ge=0.0, so 0 is accepted
		{"bad name", "/api/v1/save_weights_for_sampler", map[string]any{"model_id": mid, "path": "../x", "seq_id": 1, "type": "save_weights_for_sampler"}, 400},
		{"bad base model", "/api/v1/create_model", map[string]any{"session_id": session, "model_seq_id": 9, "base_model": "other",
			"lora_config": map[string]any{"rank": 8}, "type": "create_model"}, 400},
		{"negative rank", "/api/v1/create_model", map[string]any{"session_id": session, "model_seq_id": 9, "base_model": testBase,
			"lora_config": map[string]any{"rank": -1}, "type": "create_model"}, 400},
		{"unknown session", "/api/v1/create_model", map[string]any{"session_id": "x", "model_seq_id": 9, "base_model": testBase,
			"lora_config": map[string]any{"rank": 8}, "type": "create_model"}, 404},
		{"unknown future", "/api/v1/retrieve_future", map[string]any{"request_id": "nope"}, 404},
	}
	for _, tc := range cases {
		if st, body := c.Post(tc.path, tc.body); st != tc.want {
			t.Errorf("%s: status %d %v, want %d", tc.name, st, body, tc.want)
		} else if body["detail"] == nil {
			t.Errorf("%s: error body without detail: %v", tc.name, body)
		}
	}
	// A datum whose targets are not the next input tokens fails in the
	// worker, through the future.
	wrong := bad("target", d, func(m map[string]any) {
		tt := inputs(m)["target_tokens"].(map[string]any)["data"].([]any)
		tt[0] = float64(tr.IDs[0])
	})
	st, acc := c.Post("/api/v1/forward_backward", fbBody(mid, 1, "ppo", nil, wrong))
	if st != http.StatusOK {
		t.Fatalf("forward_backward: %d %v", st, acc)
	}
	if st, body := c.Result(acc["request_id"].(string)); st != http.StatusBadRequest || body["detail"] == nil {
		t.Errorf("non-next-token targets: %d %v, want 400 with detail", st, body)
	}
	// A field the request model lacks is ignored, as SkyRL's pydantic
	// models do (seen running: the Tinker SDK's lora_config fields), and
	// counted.
	b := fbBody(mid, 2, "ppo", nil, d)
	b["extra"] = 1
	if st, body := c.Post("/api/v1/forward_backward", b); st != http.StatusOK {
		t.Errorf("unknown field: status %d %v, want 200 (ignored)", st, body)
	}
	if got := ts.IgnoredFields(); got["POST /api/v1/forward_backward extra"] != 1 {
		t.Errorf("ignored fields %v", got)
	}
}

// SkyRL's retrieve_future holds a poll on a pending future, then answers
// 408 {"detail": "Timeout waiting for result"}; an unknown request id is
// 404 "Future not found". TryAgain switches to the hosted service's 200
// {"type": "try_again"}.
func TestSimTrainerRetrieveFutureHoldsThen408LikeSkyRL(t *testing.T) {
	ts, c, _ := newTrainer(t, getFixture(t))
	ts.PollWait = 5 * time.Millisecond
	ts.StepDelay = 300 * time.Millisecond
	model := createModel(c, createSession(c), 1)
	st, acc := c.Post("/api/v1/optim_step", optimBody(model, 1, 0.1))
	if st != http.StatusOK {
		t.Fatalf("optim_step: %d %v", st, acc)
	}
	rid := acc["request_id"].(string)
	if st, body := c.Post("/api/v1/retrieve_future", map[string]any{"request_id": rid}); st != http.StatusRequestTimeout || body["detail"] != "Timeout waiting for result" {
		t.Errorf("pending future: %d %v, want 408 Timeout waiting for result", st, body)
	}
	ts.TryAgain = true
	if st, body := c.Post("/api/v1/retrieve_future", map[string]any{"request_id": rid}); st != http.StatusOK || body["type"] != "try_again" {
		t.Errorf("pending future with TryAgain: %d %v, want 200 try_again", st, body)
	}
	if st, body := c.Post("/api/v1/retrieve_future", map[string]any{"request_id": "nope"}); st != http.StatusNotFound || body["detail"] != "Future not found" {
		t.Errorf("unknown future: %d %v, want 404 Future not found", st, body)
	}
	if st, _ := c.Result(rid); st != http.StatusOK {
		t.Errorf("the future did not resolve: %d", st)
	}
}

// SkyRL's ForwardBackwardInput takes only each loss's own loss_fn_config
// keys (ppo: the clip thresholds and value_clip; importance_sampling and
// cross_entropy: none) and answers anything else with 422, before any
// seq_id is taken.
func TestSimTrainerRefusesLossFnConfigKeysLikeSkyRL(t *testing.T) {
	f := getFixture(t)
	_, c, _ := newTrainer(t, f)
	model := createModel(c, createSession(c), 1)
	prompt := f.tk.Encode(promptText(f.hotpot[0].Q, ""))
	g := f.model.Generate(lm.InitialParams(), prompt, trainSampling(), rand.New(rand.NewPCG(1, 1)))
	tr := trajectory{IDs: concat(prompt, g.IDs), Policy: make([]bool, len(prompt)), Logprobs: make([]float64, len(prompt))}
	for _, lp := range g.Logprobs {
		tr.Policy = append(tr.Policy, true)
		tr.Logprobs = append(tr.Logprobs, lp)
	}
	d := datum(tr, 1, 0)
	for _, tc := range []struct {
		loss string
		cfg  map[string]float64
		msg  string
	}{
		{"importance_sampling", map[string]float64{"clip_low_threshold": 0.8}, "does not accept loss_fn_config keys"},
		{"ppo", map[string]float64{"clip_low": 0.8}, "Invalid loss_fn_config keys for loss_fn='ppo'"},
	} {
		st, body := c.Post("/api/v1/forward_backward", fbBody(model, 1, tc.loss, tc.cfg, d))
		if st != http.StatusUnprocessableEntity || !strings.Contains(fmt.Sprint(body["detail"]), tc.msg) {
			t.Errorf("%s %v: %d %v, want 422 %q", tc.loss, tc.cfg, st, body, tc.msg)
		}
	}
	// seq_id 1 is still free: the refused bodies took none.
	c.Call("/api/v1/forward_backward", fbBody(model, 1, "ppo", map[string]float64{"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}, d))
}

// SkyRL's session routes: create_session requires tags and sdk_version
// (422), an unknown session is 404 "Session not found" for a heartbeat and
// for create_model, an unknown model 404 "Model not found".
func TestSimTrainerSessionsAnswerLikeSkyRL(t *testing.T) {
	_, c, _ := newTrainer(t, getFixture(t))
	if st, body := c.Post("/api/v1/create_session", map[string]any{"tags": []string{}, "type": "create_session"}); st != http.StatusUnprocessableEntity {
		t.Errorf("create_session without sdk_version: %d %v, want 422", st, body)
	}
	if st, body := c.Post("/api/v1/session_heartbeat", map[string]any{"session_id": "nope", "type": "session_heartbeat"}); st != http.StatusNotFound || body["detail"] != "Session not found" {
		t.Errorf("heartbeat of an unknown session: %d %v", st, body)
	}
	if st, body := c.Post("/api/v1/create_model", map[string]any{"session_id": "nope", "model_seq_id": 0, "base_model": testBase,
		"lora_config": map[string]any{"rank": 1, "seed": 1}, "type": "create_model"}); st != http.StatusNotFound || body["detail"] != "Session not found" {
		t.Errorf("create_model in an unknown session: %d %v", st, body)
	}
	if st, body := c.Post("/api/v1/optim_step", optimBody("nope", 1, 0.1)); st != http.StatusNotFound || body["detail"] != "Model not found" {
		t.Errorf("optim_step of an unknown model: %d %v", st, body)
	}
}

// skyrl 0.3.0's JAX backend (seen running through the Tinker SDK, sim/real)
// answers forward_backward with loss_fn_output_type "scalar", per-token
// losses beside the logprobs, and no metrics; POST forward answers the
// same and trains nothing.
func TestTrainerJAXForwardBackwardShape(t *testing.T) {
	f := getFixture(t)
	ts, c, _ := newTrainer(t, f)
	mid := createModel(c, createSession(c), 0)
	tr := trainTrajectory(t, f, 7)
	res := c.Call("/api/v1/forward_backward", fbBody(mid, 1, "importance_sampling", nil, datum(tr, 1, 0)))
	if res["loss_fn_output_type"] != "scalar" || len(res["metrics"].(map[string]any)) != 0 {
		t.Errorf("forward_backward: %v", res)
	}
	out := res["loss_fn_outputs"].([]any)[0].(map[string]any)
	loss := out["elementwise_loss"].(map[string]any)["data"].([]any)
	nonzero := 0
	for _, v := range loss {
		if v.(float64) != 0 {
			nonzero++
		}
	}
	if want := len(tr.PolicyPositions()); nonzero != want {
		t.Errorf("%d non-zero per-token losses, want one per weighted token (%d)", nonzero, want)
	}
	fwd := datum(tr, 1, 0)
	body := map[string]any{"model_id": mid, "seq_id": 2, "forward_input": map[string]any{"data": []any{fwd}, "loss_fn": "importance_sampling"}, "type": "forward"}
	if got := c.Call("/api/v1/forward", body); got["loss_fn_output_type"] != "scalar" || len(got["loss_fn_outputs"].([]any)) != 1 {
		t.Errorf("forward: %v", got)
	}
	c.Call("/api/v1/optim_step", optimBody(mid, 3, 0.02))
	p, _ := ts.ModelParams(mid)
	if slices.Equal(p, lm.InitialParams()) {
		t.Error("the forward_backward's gradient was not applied")
	}
	// A forward alone leaves nothing to apply.
	mid2 := createModel(c, createSession(c), 1)
	c.Call("/api/v1/forward", map[string]any{"model_id": mid2, "seq_id": 1, "forward_input": map[string]any{"data": []any{fwd}, "loss_fn": "importance_sampling"}, "type": "forward"})
	c.Call("/api/v1/optim_step", optimBody(mid2, 2, 0.02))
	if p, _ := ts.ModelParams(mid2); !slices.Equal(p, lm.InitialParams()) {
		t.Error("a forward changed the parameters")
	}
	// Unknown routes and methods are FastAPI's.
	if st, body := c.Get("/api/v1/no_such_route"); st != 404 || body["detail"] != "Not Found" {
		t.Errorf("unknown route: %d %v", st, body)
	}
	if st, body := c.Get("/api/v1/forward_backward"); st != 405 || body["detail"] != "Method Not Allowed" {
		t.Errorf("wrong method: %d %v", st, body)
	}
}
