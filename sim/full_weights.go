package sim

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"time"
)

// FullWeightsArchive returns a gzip tar of a full-weight model export, the
// simulated trainer's sampler weights for a rank-0 (full fine-tuning)
// model, in the shape of the Hugging Face directory SkyRL's FSDP backend
// exports: config.json and model.safetensors at the top. The config marks
// the directory as the simulator's; model.safetensors holds the parameter
// vector (EncodeSafetensors), which the simulated policy's
// /update_weights_from_disk reads first (WeightFiles).
func FullWeightsArchive(params Params, baseModel string) ([]byte, error) {
	st, err := EncodeSafetensors(params)
	if err != nil {
		return nil, err
	}
	cfg, _ := json.MarshalIndent(map[string]any{
		"architectures": []string{"HindsearchSimulatorForCausalLM"}, "model_type": "hindsearch_simulator",
		"_name_or_path": baseModel, "hindsearch_simulator": true,
		"note": "simulated full weights written by the hindsearch simulator",
	}, "", "  ")
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range []struct {
		name string
		data []byte
	}{{"config.json", cfg}, {"model.safetensors", st}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
