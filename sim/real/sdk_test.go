package real_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
)

// sdkTokens are token ids both the tiny Qwen3 model and the simulator's
// Qwen2.5 vocabulary have: a chat-templated question.
var sdkTokens = []int{151644, 872, 198, 15191, 6139, 576, 10621, 2585, 323, 279, 15029, 30, 151645, 198, 151644, 77091, 198}

// driveSDK runs sdk_drive.py (the official Tinker SDK, as its users call
// it) against the Tinker API server at url and returns what it saw.
func driveSDK(t *testing.T, st *stack, url, base string) map[string]any {
	t.Helper()
	toks, _ := json.Marshal(sdkTokens)
	cmd := exec.Command(st.Python, filepath.Join(repoRoot(t), "sim", "real", "sdk_drive.py"), url, base, string(toks))
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("sdk_drive.py %s: %v\n%s%s", url, err, out, stderr)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("sdk_drive.py %s: %q: %v", url, out, err)
	}
	return got
}

// TestSDKAgainstSimAndSkyRL drives the simulated trainer of `orchestrate
// serve sim` with the official Tinker SDK as its users do (a LoRA training
// client: forward_backward, optim_step, named and ephemeral sampler saves,
// a state save, sampling, prompt logprobs, the checkpoint listing and a
// delete), and the real SkyRL the same way: the simulator must answer
// every call as SkyRL does (the same successes, refusals and shapes). The
// simulator plays skyrl 0.3.0's JAX backend: no DELETE checkpoint route.
func TestSDKAgainstSimAndSkyRL(t *testing.T) {
	st := realStack(t)
	real := driveSDK(t, st, st.SkyRL, st.Name)
	sim := serveSim(t, "recipes/sim.yaml", "sim.trainer.backend=jax", "sim.trainer.delete_route=false")
	simGot := driveSDK(t, st, sim.Trainer, "sim/Qwen2.5-3B-Instruct")
	for _, got := range []map[string]any{real, simGot} {
		if caps, ok := got["get_server_capabilities"].(map[string]any); ok {
			delete(caps, "models") // each serves its own base model
		}
	}
	keys := func(m map[string]any) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		return ks
	}
	for _, k := range keys(real) {
		if !reflect.DeepEqual(real[k], simGot[k]) {
			t.Errorf("%s:\n  SkyRL     %v\n  simulator %v", k, real[k], simGot[k])
		}
	}
	for _, k := range keys(simGot) {
		if _, ok := real[k]; !ok {
			t.Errorf("%s: only the simulator: %v", k, simGot[k])
		}
	}
	// What the SDK must have done against SkyRL for the comparison to
	// mean anything.
	for _, k := range []string{"create_lora_training_client", "forward_backward", "optim_step", "save_weights_for_sampler", "save_state",
		"save_weights_and_get_sampling_client", "sample", "compute_logprobs", "list_checkpoints"} {
		if c, _ := real[k].(map[string]any); c == nil || c["ok"] != true {
			t.Errorf("SkyRL %s: %v", k, real[k])
		}
	}
	t.Logf("SkyRL through the SDK: %v", real)
}
