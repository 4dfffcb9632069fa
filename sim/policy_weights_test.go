package sim

import (
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/sim/lm"
	"github.com/hindsearch/hindsearch/sim/weights"
)

// distinctParams are recognisable parameters, different from the initial
// ones.
func distinctParams(scale float64) lm.Params {
	p := make(lm.Params, lm.NumParams)
	for i := range p {
		p[i] = scale * float64(i%7-3)
	}
	return p
}

// unpackBytes extracts an archive's bytes into dir, with unpackArchive.
func unpackBytes(t *testing.T, b []byte, dir string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "a.tar.gz")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	unpackArchive(t, path, dir)
}

// The simulated policy answers /update_weights_from_disk exactly as SGLang
// does and serves the new parameters under the base model's name.
func TestPolicyUpdateWeightsFromDisk(t *testing.T) {
	f := getFixture(t)
	ps, c := newPolicy(t, f)
	root := t.TempDir()

	// The simulated trainer's sampler archive, unpacked.
	want := distinctParams(0.05)
	arc, err := weights.AdapterArchive(want, testBase, 8)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "run-step0001")
	unpackBytes(t, arc, dir)
	status, ans := c.Post("/update_weights_from_disk", map[string]any{"model_path": dir})
	if status != http.StatusOK || !reflect.DeepEqual(ans, map[string]any{"success": true, "message": "Succeeded to update model weights.", "num_paused_requests": float64(0)}) {
		t.Fatalf("update: %d %v", status, ans)
	}
	got, _ := ps.Params(testBase)
	for i := range want {
		if float64(float32(want[i])) != got[i] {
			t.Fatalf("param %d = %v, want %v", i, got[i], want[i])
		}
	}
	if ps.WeightsPath() != dir {
		t.Errorf("WeightsPath %q", ps.WeightsPath())
	}
	// Sampling under the base name uses them: the prompt logprobs are the
	// new parameters' scores.
	// An agent turn: a chat prompt and a sampled answer, scored where the
	// two parameter sets disagree.
	prompt := f.tk.Encode(promptText(f.hotpot[0].Q, "") + thoughtSearch + "<search> " + f.hotpot[0].Q + " </search>")
	last := -1
	for i, lp := range f.model.Score(got, prompt) {
		if lp != f.model.Score(lm.InitialParams(), prompt)[i] {
			last = i
		}
	}
	if last < 0 {
		t.Fatal("the test sequence does not tell the parameters apart")
	}
	status, out := c.Post("/v1/completions", map[string]any{"model": testBase, "prompt": prompt, "max_tokens": 1, "prompt_logprobs": 0})
	if status != http.StatusOK {
		t.Fatalf("completions: %d %v", status, out)
	}
	plp := out["choices"].([]any)[0].(map[string]any)["prompt_logprobs"].([]any)
	served := plp[last].(map[string]any)[strconv.Itoa(prompt[last])].(map[string]any)["logprob"].(float64)
	if exp, initial := f.model.Score(got, prompt)[last], f.model.Score(lm.InitialParams(), prompt)[last]; served != exp || served == initial {
		t.Errorf("prompt logprob %v: new weights give %v, initial %v", served, exp, initial)
	}
	// SGLang renames the served model after a successful load
	// (_update_model_path_info): /v1/models, /get_model_info and
	// /get_server_info report the loaded path.
	status, listed := c.Get("/v1/models")
	if data := listed["data"].([]any); status != http.StatusOK || len(data) != 1 || data[0].(map[string]any)["id"] != dir {
		t.Errorf("/v1/models after the update: %v, want the id %s", listed, dir)
	}
	if _, info := c.Get("/get_model_info"); info["model_path"] != dir {
		t.Errorf("/get_model_info after the update: %v", info)
	}
	if _, info := c.Get("/get_server_info"); info["model_path"] != dir || info["served_model_name"] != dir {
		t.Errorf("/get_server_info after the update: %v", info)
	}

	// A merged-model directory's model.safetensors wins over an adapter file.
	second := distinctParams(-0.02)
	st, _ := weights.EncodeSafetensors(second)
	full := filepath.Join(root, "merged")
	unpackBytes(t, arc, full)
	if err := os.WriteFile(filepath.Join(full, "model.safetensors"), st, 0o644); err != nil {
		t.Fatal(err)
	}
	if status, ans := c.Post("/update_weights_from_disk", map[string]any{"model_path": full, "load_format": "auto", "abort_all_requests": false}); status != http.StatusOK || ans["success"] != true {
		t.Fatalf("update from model.safetensors: %d %v", status, ans)
	}
	if got, _ := ps.Params(testBase); float64(float32(second[1])) != got[1] || float64(float32(second[2])) != got[2] {
		t.Errorf("model.safetensors not preferred: %v", got[:3])
	}
}

func TestPolicyUpdateWeightsFromDiskRefused(t *testing.T) {
	f := getFixture(t)
	ps, c := newPolicy(t, f)
	root := t.TempDir()
	broken := filepath.Join(root, "broken")
	if err := os.MkdirAll(broken, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(broken, "adapter_model.safetensors"), []byte("garbage!"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := ps.Params(testBase)
	for _, tc := range []struct {
		name string
		body map[string]any
		want string
	}{
		{"missing dir", map[string]any{"model_path": filepath.Join(root, "none")}, "Failed to get weights iterator: "},
		{"no weights", map[string]any{"model_path": root}, "holds none of"},
		{"no path", map[string]any{}, "model_path is required"},
		{"load format", map[string]any{"model_path": broken, "load_format": "gguf"}, "load_format"},
	} {
		status, ans := c.Post("/update_weights_from_disk", tc.body)
		msg, _ := ans["message"].(string)
		if status != http.StatusBadRequest || ans["success"] != false || ans["num_paused_requests"] != float64(0) || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: %d %v, want 400 success false with a message saying %q", tc.name, status, ans, tc.want)
		}
	}
	// Nothing was loaded: the weights served are unchanged.
	if after, _ := ps.Params(testBase); !reflect.DeepEqual(after, before) || ps.WeightsPath() != "" {
		t.Error("an update refused before loading changed the weights")
	}
}

// A load that fails part way is rolled back by reading the failed path
// again (SGLang's weight updater sets model_path before it loads): the
// replica serves neither its old weights nor the new ones, and still
// reports the name of its last successful load.
func TestPolicyFailedLoadRollsBackToTheFailedPath(t *testing.T) {
	f := getFixture(t)
	ps, c := newPolicy(t, f)
	root := t.TempDir()
	broken := filepath.Join(root, "broken")
	if err := os.MkdirAll(broken, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(broken, "adapter_model.safetensors"), []byte("garbage!"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := ps.Params(testBase)
	status, ans := c.Post("/update_weights_from_disk", map[string]any{"model_path": broken, "load_format": "auto", "abort_all_requests": false})
	msg, _ := ans["message"].(string)
	if status != http.StatusBadRequest || ans["success"] != false || !strings.Contains(msg, "Failed to update weights: ") ||
		!strings.Contains(msg, "safetensors") || !strings.HasSuffix(msg, "\nRolling back to original weights.") {
		t.Errorf("broken file: %d %v", status, ans)
	}
	if after, _ := ps.Params(testBase); reflect.DeepEqual(after, before) {
		t.Error("after a load that failed part way the replica serves its old weights; SGLang's rollback re-reads the failed path")
	}
	if _, info := c.Get("/get_model_info"); info["model_path"] != testBase || ps.WeightsPath() != "" {
		t.Errorf("the failed load renamed the model: %v", info)
	}
}
