package sim

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
)

// The simulated policy's full-weight reload, SGLang's
// POST /update_weights_from_disk (PROTOCOLS.md §2): the base model name goes
// on serving, with the parameters read from model_path.
//
// SIMULATED: SGLang loads a merged Hugging Face model directory
// (config.json and model*.safetensors). The simulated trainer writes that
// shape for a rank-0 (full fine-tuning) model, config.json and
// model.safetensors (PackFullWeights), and a PEFT-shaped adapter for a
// LoRA rank, whose adapter_model.safetensors also holds the simulator's
// complete parameter vector (not a low-rank delta). The simulated policy
// reads that vector from model.safetensors when the directory has one, else
// from adapter_model.safetensors; config.json is not read. It swaps the parameters between requests:
// requests in flight finish with the parameters they started with, none is
// paused (num_paused_requests is always 0). On failure it keeps the weights
// it served, as SGLang rolls back to its original weights.

// WeightFiles are the files, in order of preference, that the simulated
// policy's /update_weights_from_disk reads parameters from.
var WeightFiles = []string{"model.safetensors", "adapter_model.safetensors"}

// weightsFromDiskRequest is SGLang's UpdateWeightFromDiskReqInput, with
// the fields PROTOCOLS.md §2 names.
type weightsFromDiskRequest struct {
	ModelPath        string  `json:"model_path"`
	LoadFormat       *string `json:"load_format"`
	AbortAllRequests bool    `json:"abort_all_requests"`
}

// weightsFromDiskAnswer writes SGLang's answer: 200 on success, 400 on
// failure, the same body either way.
func weightsFromDiskAnswer(w http.ResponseWriter, ok bool, msg string) {
	status := http.StatusOK
	if !ok {
		status = http.StatusBadRequest
	}
	writeJSON(w, status, map[string]any{"success": ok, "message": msg, "num_paused_requests": 0})
}

func (s *PolicyServer) updateWeightsFromDisk(w http.ResponseWriter, r *http.Request) {
	var req weightsFromDiskRequest
	err := s.ignored.decode(w, r, "POST /update_weights_from_disk", &req)
	if err != nil {
		weightsFromDiskAnswer(w, false, err.Error())
		return
	}
	if req.ModelPath == "" {
		weightsFromDiskAnswer(w, false, "model_path is required")
		return
	}
	if f := req.LoadFormat; f != nil && *f != "auto" && *f != "safetensors" {
		weightsFromDiskAnswer(w, false, fmt.Sprintf("Failed to get weights iterator: load_format %q is not supported by the simulator (auto, safetensors).", *f))
		return
	}
	params, err := ReadWeights(filepath.Clean(req.ModelPath))
	if err != nil {
		weightsFromDiskAnswer(w, false, fmt.Sprintf("Failed to get weights iterator: %v.", err))
		return
	}
	s.mu.Lock()
	s.adapters[s.baseModel] = params
	s.weightsPath = req.ModelPath
	s.mu.Unlock()
	weightsFromDiskAnswer(w, true, "Succeeded to update model weights.")
}

// ReadWeights loads the simulator parameters of a full-weights directory:
// the first of WeightFiles it holds.
func ReadWeights(dir string) (Params, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	for _, name := range WeightFiles {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		p, err := DecodeSafetensors(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
		}
		return p, nil
	}
	return nil, fmt.Errorf("%s holds none of %v", dir, WeightFiles)
}

// WeightsPath is the model_path of the last successful
// /update_weights_from_disk ("" while the replica serves its initial
// weights).
func (s *PolicyServer) WeightsPath() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.weightsPath
}
