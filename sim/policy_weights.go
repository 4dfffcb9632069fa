package sim

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"

	"github.com/hindsearch/hindsearch/sim/internal/httpx"
	"github.com/hindsearch/hindsearch/sim/lm"
	"github.com/hindsearch/hindsearch/sim/weights"
)

// The simulated policy's full-weight reload, SGLang's
// POST /update_weights_from_disk (PROTOCOLS.md §2): the base model name goes
// on serving, with the parameters read from model_path.
//
// SIMULATED: SGLang loads a merged Hugging Face model directory
// (config.json and model*.safetensors). The simulated trainer writes that
// shape for a rank-0 (full fine-tuning) model, config.json and
// model.safetensors (weights.PackFullWeights), and a PEFT-shaped adapter for a
// LoRA rank, whose adapter_model.safetensors also holds the simulator's
// complete parameter vector (not a low-rank delta). The simulated policy
// reads that vector from model.safetensors when the directory has one, else
// from adapter_model.safetensors; config.json is not read. It swaps the parameters between requests:
// requests in flight finish with the parameters they started with, none is
// paused (num_paused_requests is always 0).
//
// A successful load renames the served model, as SGLang's
// _update_model_path_info (managers/tokenizer_manager.py) does: /v1/models
// lists model_path as the model's id and /get_model_info and
// /get_server_info report it as model_path. Requests on the simulator's
// vLLM routes keep naming the base model.
//
// A failed load follows SGLang's weight updater
// (model_executor/model_runner_components/weight_updater.py): when the
// weights cannot be found (no directory, no weights file) the answer is 400
// "Failed to get weights iterator: ..." and nothing was loaded; when they
// are found but fail while loading (a file that does not decode, a shape
// that does not fit) the answer is 400 "Failed to update weights: ...
// Rolling back to original weights.", and the rollback re-reads the same
// failed path (the updater set it before loading), not the weights served
// before. SIMULATED: the served parameters are then a mix, the first half
// from what the failed file held (zeros where it held nothing) and the
// rest as before: neither the old weights nor the new. The reported
// model_path stays that of the last successful load (the tokenizer manager
// renames only on success).

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
	httpx.WriteJSON(w, status, map[string]any{"success": ok, "message": msg, "num_paused_requests": 0})
}

func (s *PolicyServer) updateWeightsFromDisk(w http.ResponseWriter, r *http.Request) {
	var req weightsFromDiskRequest
	err := s.ignored.Decode(w, r, "POST /update_weights_from_disk", &req)
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
	if req.ModelPath == s.baseModel {
		// The model the server was started with, a Hugging Face repo id
		// its loader finds in the local cache (model_loader/weight_utils.py):
		// the initial weights, served under their own name again.
		s.mu.Lock()
		s.adapters[s.baseModel] = lm.InitialParams()
		s.weightsPath = ""
		s.mu.Unlock()
		weightsFromDiskAnswer(w, true, "Succeeded to update model weights.")
		return
	}
	dir := filepath.Clean(req.ModelPath)
	file, err := weights.FindFile(dir)
	if err != nil {
		weightsFromDiskAnswer(w, false, fmt.Sprintf("Failed to get weights iterator: %v.", err))
		return
	}
	params, err := weights.ReadFile(file)
	if err != nil {
		s.mu.Lock()
		s.adapters[s.baseModel] = mixedWeights(s.adapters[s.baseModel], file)
		s.mu.Unlock()
		weightsFromDiskAnswer(w, false, fmt.Sprintf("Failed to update weights: %v.\nRolling back to original weights.", err))
		return
	}
	s.mu.Lock()
	s.adapters[s.baseModel] = params
	s.weightsPath = req.ModelPath
	s.mu.Unlock()
	weightsFromDiskAnswer(w, true, "Succeeded to update model weights.")
}

// mixedWeights is what a replica serves after a load of file failed part
// way and its rollback read file again (see above): the first half of the
// parameters from file's raw float32 data, where it has them, else zero;
// the rest from old.
func mixedWeights(old lm.Params, file string) lm.Params {
	out := append(lm.Params(nil), old...)
	b, _ := os.ReadFile(file)
	var data []byte
	if len(b) >= 8 {
		n := int(binary.LittleEndian.Uint64(b[:8]))
		if n >= 0 && n <= len(b)-8 {
			data = b[8+n:]
		}
	}
	for i := range len(out) / 2 {
		out[i] = 0
		if 4*i+4 <= len(data) {
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:])))
		}
	}
	return out
}

// WeightsPath is the model_path of the last successful
// /update_weights_from_disk ("" while the replica serves its initial
// weights).
func (s *PolicyServer) WeightsPath() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.weightsPath
}
