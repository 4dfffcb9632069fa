package trainer

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/sim/weights"
)

func sampleBody(session string, seq int, prompt []int, params map[string]any) map[string]any {
	return map[string]any{"sampling_session_id": session, "seq_id": seq, "num_samples": 1,
		"prompt":          map[string]any{"chunks": []any{map[string]any{"tokens": prompt, "type": "encoded_text"}}},
		"sampling_params": params, "prompt_logprobs": false, "topk_prompt_logprobs": 0, "type": "sample"}
}

func neutral(max int, seed int64, stop ...string) map[string]any {
	return map[string]any{"max_tokens": max, "seed": seed, "stop": stop, "temperature": 1, "top_k": -1, "top_p": 1}
}

// ephemeralSave makes the SDK's save_weights_and_get_sampling_client save
// of mid at seq and returns its sampling session.
func ephemeralSave(t *testing.T, c apiClient, mid string, seq, ss int) string {
	t.Helper()
	res := c.Call("/api/v1/save_weights_for_sampler", map[string]any{"model_id": mid, "seq_id": seq, "sampling_session_seq_id": ss, "type": "save_weights_for_sampler"})
	if res["path"] != nil {
		t.Errorf("ephemeral save answered path %v, want null", res["path"])
	}
	id, _ := res["sampling_session_id"].(string)
	if !strings.HasPrefix(id, "sampling_") {
		t.Fatalf("ephemeral save: %v", res)
	}
	return id
}

// The sampling routes answer as SkyRL's api.py: a sampling session needs a
// known session and exactly one of base_model and model_path; asample's
// checks come in its order with its statuses and texts.
func TestSimSamplingRefusalsLikeSkyRL(t *testing.T) {
	f := getFixture(t)
	_, c, _ := newTrainer(t, f)
	session := createSession(c)
	prompt := f.tk.Encode("<|im_start|>user\nwho?<|im_end|>\n<|im_start|>assistant\n")
	for _, tc := range []struct {
		body   map[string]any
		status int
		detail string
	}{
		{map[string]any{"session_id": "nope", "sampling_session_seq_id": 0, "base_model": testBase}, 404, "Session not found"},
		{map[string]any{"session_id": session, "sampling_session_seq_id": 0}, 400, "Exactly one of base_model or model_path must be provided"},
		{map[string]any{"session_id": session, "sampling_session_seq_id": 0, "base_model": testBase, "model_path": "tinker://m/a"}, 400, "Exactly one of base_model or model_path must be provided"},
	} {
		if st, body := c.Post("/api/v1/create_sampling_session", tc.body); st != tc.status || body["detail"] != tc.detail {
			t.Errorf("create_sampling_session %v: %d %v, want %d %q", tc.body, st, body, tc.status, tc.detail)
		}
	}
	base := newSampling(t, c, map[string]any{"session_id": session, "sampling_session_seq_id": 0, "base_model": testBase})
	badPath := newSampling(t, c, map[string]any{"session_id": session, "sampling_session_seq_id": 1, "model_path": "tinker://m/weights/a"})
	noModel := newSampling(t, c, map[string]any{"session_id": session, "sampling_session_seq_id": 2, "model_path": "tinker://nobody/a"})
	mid := createModel(c, session, 0)
	noCkpt := newSampling(t, c, map[string]any{"session_id": session, "sampling_session_seq_id": 3, "model_path": "tinker://" + mid + "/sampler_weights/none"})
	withoutSeq := sampleBody(base, 0, prompt, neutral(4, 1))
	delete(withoutSeq, "seq_id")
	noMax := sampleBody(base, 0, prompt, neutral(4, 1))
	delete(noMax["sampling_params"].(map[string]any), "max_tokens")
	mixed := sampleBody(base, 0, prompt, neutral(4, 1))
	mixed["sampling_params"].(map[string]any)["stop"] = []any{"</search>", 5}
	for _, tc := range []struct {
		name   string
		body   map[string]any
		status int
		detail string
	}{
		{"no seq_id", withoutSeq, 422, "Value error, 'seq_id' must be provided when 'sampling_session_id' is used"},
		{"colon", sampleBody("sampling_a:1", 0, prompt, neutral(4, 1)), 400, "sampling_session_id must not contain ':' (the routing-key delimiter)"},
		{"unknown session", sampleBody("sampling_zz", 0, prompt, neutral(4, 1)), 404, "Sampling session not found"},
		{"training state path", sampleBody(badPath, 0, prompt, neutral(4, 1)), 400, "model_path must be tinker://model_id/checkpoint_id or tinker://model_id/sampler_weights/checkpoint_id"},
		{"unknown model", sampleBody(noModel, 0, prompt, neutral(4, 1)), 404, "Model not found"},
		{"unknown checkpoint", sampleBody(noCkpt, 0, prompt, neutral(4, 1)), 404, "Checkpoint not found: " + mid + "/none"},
		{"no max_tokens", noMax, 400, "max_tokens is currently required"},
		{"zero max_tokens", sampleBody(base, 0, prompt, neutral(0, 1)), 400, "max_tokens must be a positive number"},
		{"mixed stop", mixed, 400, "stop must be either all integers (token IDs) or all strings, not mixed"},
	} {
		if st, body := c.Post("/api/v1/asample", tc.body); st != tc.status || body["detail"] != tc.detail {
			t.Errorf("%s: %d %v, want %d %q", tc.name, st, body, tc.status, tc.detail)
		}
	}
	// Another base model fails in the engine: a failed future, 400 on
	// retrieve_future.
	other := newSampling(t, c, map[string]any{"session_id": session, "sampling_session_seq_id": 4, "base_model": "other/model"})
	if st, body := sample(t, c, sampleBody(other, 0, prompt, neutral(4, 1))); st != 400 || body["detail"] != fmt.Sprintf("Engine is configured for '%s' but request specified 'other/model'", testBase) {
		t.Errorf("other base model: %d %v", st, body)
	}
}

// The JAX backend samples the checkpoint a session names, stops only where
// told (EOS included as a stop string), seeds sample i with seed + i, and
// leaves the first prompt logprob out; an ephemeral save writes the
// adapter anyway.
func TestSimSamplingJAX(t *testing.T) {
	f := getFixture(t)
	_, c, ckpt := newTrainer(t, f)
	session := createSession(c)
	mid := createModel(c, session, 0)
	s0 := ephemeralSave(t, c, mid, 1, 0)
	prompt := f.tk.Encode(promptText(f.hotpot[0].Q, ""))
	body := sampleBody(s0, 0, prompt, neutral(200, 7, "</search>", "</answer>", "<|im_end|>"))
	body["num_samples"] = 2
	body["prompt_logprobs"] = true
	st, res := sample(t, c, body)
	if st != 200 {
		t.Fatalf("asample: %d %v", st, res)
	}
	seqs := res["sequences"].([]any)
	if len(seqs) != 2 {
		t.Fatalf("%d sequences, want 2", len(seqs))
	}
	first := seqs[0].(map[string]any)
	if first["stop_reason"] != "stop" || len(first["tokens"].([]any)) != len(first["logprobs"].([]any)) {
		t.Errorf("first sequence %v", first)
	}
	if lps := res["prompt_logprobs"].([]any); len(lps) != len(prompt)-1 {
		t.Errorf("%d prompt logprobs for %d tokens, want %d (JAX: no leading null)", len(lps), len(prompt), len(prompt)-1)
	}
	// Sample 1 of seed 7 is sample 0 of seed 8.
	again := sampleBody(s0, 1, prompt, neutral(200, 8, "</search>", "</answer>", "<|im_end|>"))
	_, res8 := sample(t, c, again)
	if fmt.Sprint(res8["sequences"].([]any)[0]) != fmt.Sprint(seqs[1]) {
		t.Error("sample 1 of seed 7 differs from sample 0 of seed 8")
	}
	// Without the end token among the stops, sampling runs past it.
	noEOS := sampleBody(s0, 2, prompt, neutral(40, 7))
	_, long := sample(t, c, noEOS)
	if l := long["sequences"].([]any)[0].(map[string]any); l["stop_reason"] != "length" || len(l["tokens"].([]any)) != 40 {
		t.Errorf("no stops: %v tokens, stop_reason %v; want 40 and length", len(l["tokens"].([]any)), l["stop_reason"])
	}
	if _, err := os.Stat(filepath.Join(ckpt, mid, "sampler_weights", "ss0_seq1.tar.gz")); err != nil {
		t.Errorf("the JAX backend's ephemeral save wrote no adapter: %v", err)
	}
	// The base model samples on JAX.
	base := newSampling(t, c, map[string]any{"session_id": session, "sampling_session_seq_id": 1, "base_model": testBase})
	if st, res := sample(t, c, sampleBody(base, 0, prompt, neutral(4, 1))); st != 200 {
		t.Errorf("base model on JAX: %d %v", st, res)
	}
}

// The FSDP backend samples what the last save broadcast, whatever
// checkpoint a session names; it cannot sample the base model; its
// prompt logprobs start with null; an ephemeral save writes a marker.
func TestSimSamplingFSDP(t *testing.T) {
	f := getFixture(t)
	_, c, ckpt := newTrainerBackend(t, f, BackendFSDP, 0)
	session := createSession(c)
	mid := createModel(c, session, 0)
	s0 := ephemeralSave(t, c, mid, 1, 0)
	prompt := f.tk.Encode(promptText(f.hotpot[0].Q, ""))
	body := sampleBody(s0, 0, prompt, neutral(1, 1))
	body["prompt_logprobs"] = true
	_, before := sample(t, c, body)
	lps := before["prompt_logprobs"].([]any)
	if len(lps) != len(prompt) || lps[0] != nil {
		t.Fatalf("%d prompt logprobs (first %v) for %d tokens, want one each, the first null", len(lps), lps[0], len(prompt))
	}
	arc, err := weights.ReadArchiveFile(filepath.Join(ckpt, mid, "sampler_weights", "ss0_seq1.tar.gz"), "MARKER")
	if err != nil || !strings.Contains(string(arc), "persist=False") {
		t.Errorf("the FSDP backend's ephemeral save: %q %v, want SkyRL's marker", arc, err)
	}
	// Sample, train a step and save again: the first session now samples
	// the new weights.
	gen := sampleBody(s0, 1, prompt, neutral(200, 1, "</search>", "</answer>", "<|im_end|>"))
	_, was := sample(t, c, gen)
	tr := trainTrajectory(t, f, 3)
	c.Call("/api/v1/forward_backward", fbBody(mid, 2, "importance_sampling", nil, datum(tr, 5, 0)))
	c.Call("/api/v1/optim_step", optimBody(mid, 3, 0.5))
	ephemeralSave(t, c, mid, 4, 1)
	gen["seq_id"] = 2
	_, now := sample(t, c, gen)
	if fmt.Sprint(was["sequences"]) == fmt.Sprint(now["sequences"]) {
		t.Error("the first session still samples the weights it was saved with: FSDP serves the last save's")
	}
	base := newSampling(t, c, map[string]any{"session_id": session, "sampling_session_seq_id": 2, "base_model": testBase})
	if st, res := sample(t, c, sampleBody(base, 0, prompt, neutral(4, 1))); st != http.StatusBadRequest ||
		res["detail"] != "Sampling requested for unknown model_id(s): ['']" {
		t.Errorf("base model on FSDP: %d %v", st, res)
	}
}

// newSampling makes a sampling session and returns its id.
func newSampling(t *testing.T, c apiClient, body map[string]any) string {
	t.Helper()
	st, res := c.Post("/api/v1/create_sampling_session", body)
	id, _ := res["sampling_session_id"].(string)
	if st != http.StatusOK || id == "" {
		t.Fatalf("create_sampling_session %v: %d %v", body, st, res)
	}
	return id
}

// sample posts an asample and returns its future's answer.
func sample(t *testing.T, c apiClient, body map[string]any) (int, map[string]any) {
	t.Helper()
	st, acc := c.Post("/api/v1/asample", body)
	rid, _ := acc["request_id"].(string)
	if st != http.StatusOK || rid == "" {
		t.Fatalf("asample: %d %v", st, acc)
	}
	return c.Result(rid)
}
