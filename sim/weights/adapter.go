package weights

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/hindsearch/hindsearch/sim/lm"
)

// The simulated trainer saves its parameters as a PEFT-shaped adapter, the
// way SkyRL saves sampler weights: a tar holding adapter_config.json and
// adapter_model.safetensors, packed as one of SkyRL's backends packs it
// (PackArchive). The safetensors file holds one F32 tensor,
// "hindsearch_sim.params", and metadata saying it is a simulator adapter,
// not a real LoRA.

const paramsTensor = "hindsearch_sim.params"

// EncodeSafetensors encodes params as a safetensors file.
func EncodeSafetensors(params lm.Params) ([]byte, error) {
	header := map[string]any{
		"__metadata__": map[string]string{"format": "pt", "hindsearch_simulator": "true",
			"note": "simulated policy parameters, not a real LoRA"},
		paramsTensor: map[string]any{"dtype": "F32", "shape": []int{len(params)}, "data_offsets": []int{0, 4 * len(params)}},
	}
	hb, err := json.Marshal(header)
	if err != nil {
		return nil, err
	}
	for len(hb)%8 != 0 {
		hb = append(hb, ' ')
	}
	var buf bytes.Buffer
	_ = binary.Write(&buf, binary.LittleEndian, uint64(len(hb)))
	buf.Write(hb)
	for _, p := range params {
		_ = binary.Write(&buf, binary.LittleEndian, math.Float32bits(float32(p)))
	}
	return buf.Bytes(), nil
}

// DecodeSafetensors reads the parameter tensor from a safetensors file.
func DecodeSafetensors(b []byte) (lm.Params, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("safetensors: file too short")
	}
	n := binary.LittleEndian.Uint64(b[:8])
	if n > uint64(len(b)-8) {
		return nil, fmt.Errorf("safetensors: header length %d past end of file", n)
	}
	var header map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &header); err != nil {
		return nil, fmt.Errorf("safetensors: header: %w", err)
	}
	raw, ok := header[paramsTensor]
	if !ok {
		return nil, fmt.Errorf("safetensors: no tensor %q (not a hindsearch simulator adapter)", paramsTensor)
	}
	var t struct {
		Dtype       string `json:"dtype"`
		Shape       []int  `json:"shape"`
		DataOffsets []int  `json:"data_offsets"`
	}
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("safetensors: tensor header: %w", err)
	}
	data := b[8+n:]
	if t.Dtype != "F32" || len(t.Shape) != 1 || len(t.DataOffsets) != 2 || t.DataOffsets[0] < 0 || t.DataOffsets[1] > len(data) ||
		t.DataOffsets[1]-t.DataOffsets[0] != 4*t.Shape[0] {
		return nil, fmt.Errorf("safetensors: bad tensor %s %v %v", t.Dtype, t.Shape, t.DataOffsets)
	}
	if t.Shape[0] != int(lm.NumParams) {
		return nil, fmt.Errorf("safetensors: %d parameters, want %d", t.Shape[0], lm.NumParams)
	}
	p := make(lm.Params, t.Shape[0])
	for i := range p {
		off := t.DataOffsets[0] + 4*i
		p[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(data[off : off+4])))
	}
	return p, nil
}

// AdapterArchive returns a PEFT-shaped adapter holding params, packed in
// SkyRL's JAX layout (PackAdapter with ArchiveJAX).
func AdapterArchive(params lm.Params, baseModel string, rank int) ([]byte, error) {
	return PackAdapter(ArchiveJAX, params, baseModel, rank)
}

// PackAdapter returns an archive in layout (see PackArchive) of a
// PEFT-shaped adapter holding params: adapter_config.json and
// adapter_model.safetensors, at the archive's top level.
func PackAdapter(layout ArchiveLayout, params lm.Params, baseModel string, rank int) ([]byte, error) {
	st, err := EncodeSafetensors(params)
	if err != nil {
		return nil, err
	}
	cfg, _ := json.MarshalIndent(map[string]any{
		"peft_type": "LORA", "r": rank, "lora_alpha": rank, "base_model_name_or_path": baseModel,
		"target_modules": []string{}, "task_type": "CAUSAL_LM",
		"hindsearch_simulator": true, "note": "simulated adapter written by the hindsearch simulator",
	}, "", "  ")
	return PackArchive(layout, map[string][]byte{"adapter_config.json": cfg, "adapter_model.safetensors": st})
}

// ReadAdapter loads the parameters of an unpacked adapter directory.
func ReadAdapter(dir string) (lm.Params, error) {
	if _, err := os.Stat(filepath.Join(dir, "adapter_config.json")); err != nil {
		return nil, fmt.Errorf("adapter_config.json: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "adapter_model.safetensors"))
	if err != nil {
		return nil, err
	}
	return DecodeSafetensors(b)
}
