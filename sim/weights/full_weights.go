package weights

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hindsearch/hindsearch/sim/lm"
)

// PackFullWeights returns an archive in layout (see PackArchive) of a
// full-weight model export, the simulated trainer's sampler weights for a
// rank-0 (full fine-tuning) model, in the shape of the Hugging Face
// directory SkyRL's FSDP backend exports: config.json and model.safetensors
// at the top. The config marks the directory as the simulator's;
// model.safetensors holds the parameter vector (EncodeSafetensors), which
// the simulated policy's /update_weights_from_disk reads first
// (WeightFiles). SIMULATED: a real export also holds the tokenizer files
// and the weights of every layer.
func PackFullWeights(layout ArchiveLayout, params lm.Params, baseModel string) ([]byte, error) {
	st, err := EncodeSafetensors(params)
	if err != nil {
		return nil, err
	}
	cfg, _ := json.MarshalIndent(map[string]any{
		"architectures": []string{"HindsearchSimulatorForCausalLM"}, "model_type": "hindsearch_simulator",
		"_name_or_path": baseModel, "hindsearch_simulator": true,
		"note": "simulated full weights written by the hindsearch simulator",
	}, "", "  ")
	return PackArchive(layout, map[string][]byte{"config.json": cfg, "model.safetensors": st})
}

// WeightFiles are the files, in order of preference, that the simulated
// policy's /update_weights_from_disk reads parameters from.
var WeightFiles = []string{"model.safetensors", "adapter_model.safetensors"}

// FindFile returns the path of the first of WeightFiles in directory dir:
// what SGLang's loader finds before it reads any tensor. A dir that is not
// a directory, or holds none of them, is an error.
func FindFile(dir string) (string, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return "", err
	}
	if !info.IsDir() {
		return "", fmt.Errorf("%s is not a directory", dir)
	}
	for _, name := range WeightFiles {
		f := filepath.Join(dir, name)
		if _, err := os.Stat(f); err == nil {
			return f, nil
		}
	}
	return "", fmt.Errorf("%s holds none of %v", dir, WeightFiles)
}

// ReadFile decodes the parameters of one weights file (a safetensors file
// that EncodeSafetensors wrote); the error names the file.
func ReadFile(file string) (lm.Params, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	p, err := DecodeSafetensors(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return p, nil
}

// ReadWeights loads the simulator parameters of a full-weights directory:
// the first of WeightFiles it holds.
func ReadWeights(dir string) (lm.Params, error) {
	file, err := FindFile(dir)
	if err != nil {
		return nil, err
	}
	return ReadFile(file)
}
