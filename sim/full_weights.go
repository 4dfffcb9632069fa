package sim

import (
	"encoding/json"

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
