package orchestrator

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// modelOf is the trainer model id a run directory's trainer_model.json
// records (the run's latest life).
func modelOf(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, modelFile))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		ModelID string `json:"model_id"`
	}
	if err := json.Unmarshal(b, &m); err != nil || m.ModelID == "" {
		t.Fatalf("%s: %v %q", modelFile, err, b)
	}
	return m.ModelID
}

// adapterIn is the name the run in dir serves step's weights under
// (recipe "test").
func adapterIn(t *testing.T, dir string, step int) string {
	t.Helper()
	return adapterName("test", modelOf(t, dir), step)
}

// Two runs of one recipe get adapter names of their own: the trainer's
// model id is in them.
func TestAdapterNameCarriesTheModel(t *testing.T) {
	a, b := adapterName("my recipe", "model_1a2b3c4d", 3), adapterName("my recipe", "model_99", 3)
	if a != "my_recipe-model_1a2b3c4d-step0003" || a == b {
		t.Errorf("adapter names %q and %q", a, b)
	}
	if m := reStepSuffix.FindStringSubmatch(a); m == nil || m[1] != "3" {
		t.Errorf("the step suffix of %q reads %v", a, m)
	}
}
