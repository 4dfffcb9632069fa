package real_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestBenchCPUReal runs `orchestrate bench --only cpu-real`: the
// orchestrator's CPU per policy turn against the real vLLM beside the same
// rollouts against the simulator, in alternating pairs (docs/bench.md,
// "Against the real vLLM"). Nothing here is timed: the test holds the
// command to producing both figures over real turns.
func TestBenchCPUReal(t *testing.T) {
	st := realStack(t)
	out := filepath.Join(t.TempDir(), "bench.json")
	args := []string{"bench", "--only", "cpu-real", "--scale", "0.25", "--json", out,
		"--real-policy-set", "policy.urls=" + st.VLLM, "--real-policy-set", "policy.model=" + st.Name,
		"--real-policy-set", "policy.tokenizer=qwen3"}
	for _, s := range benchRealRollout {
		args = append(args, "--real-rollout-set", s)
	}
	t.Log(orch(t, args, nil))
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Real      float64                       `json:"cpu_us_per_turn_real_policy"`
		Sim       float64                       `json:"cpu_us_per_turn_real_sim"`
		Scenarios map[string]map[string]float64 `json:"scenarios"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Real <= 0 || rep.Sim <= 0 || rep.Scenarios["cpu-real-policy"]["turns"] == 0 {
		t.Errorf("cpu-real: real %v, sim %v, scenarios %v", rep.Real, rep.Sim, rep.Scenarios["cpu-real-policy"])
	}
	// Each side says the work it measured: its turns by kind add up.
	for _, side := range []string{"cpu-real-policy", "cpu-real-sim"} {
		c := rep.Scenarios[side]
		if k := c["turns_search"] + c["turns_answer"] + c["turns_invalid"]; k != c["turns"] || c["allocs_per_turn"] <= 0 {
			t.Errorf("%s: turns %v by kind %v, allocations per turn %v", side, c["turns"], k, c["allocs_per_turn"])
		}
	}
}

// benchRealRollout are recipes/real-cpu.yaml's rollout budgets, which both
// sides of cpu-real share.
var benchRealRollout = []string{"rollout.max_turns=3", "rollout.max_turn_tokens=48", "rollout.max_obs_tokens=160",
	"rollout.max_context_tokens=1024", "retriever.topk=2"}
