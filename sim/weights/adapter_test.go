package weights

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/hindsearch/hindsearch/sim/lm"
)

// The base model the tests' adapters name.
const testBase = "sim-base"

func TestSafetensorsRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for k := 0; k < 20; k++ {
		p := make(lm.Params, lm.NumParams)
		for i := range p {
			p[i] = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(8)-4))
		}
		if k == 0 {
			p = lm.InitialParams()
		}
		b, err := EncodeSafetensors(p)
		if err != nil {
			t.Fatal(err)
		}
		// The safetensors layout: u64 header length, a JSON header padded
		// to 8 bytes, then the little-endian F32 data.
		n := binary.LittleEndian.Uint64(b[:8])
		if n%8 != 0 || int(8+n)+4*len(p) != len(b) {
			t.Fatalf("header length %d, file %d bytes", n, len(b))
		}
		var header map[string]any
		if err := json.Unmarshal(b[8:8+n], &header); err != nil {
			t.Fatalf("header: %v", err)
		}
		if md, _ := header["__metadata__"].(map[string]any); md["hindsearch_simulator"] != "true" {
			t.Errorf("metadata %v", header["__metadata__"])
		}
		got, err := DecodeSafetensors(b)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(p) {
			t.Fatalf("%d params decoded, want %d", len(got), len(p))
		}
		for i := range p {
			if got[i] != float64(float32(p[i])) {
				t.Errorf("param %d: %v decoded as %v", i, p[i], got[i])
			}
		}
	}
}

// safetensorsFile builds a safetensors file with the given header and data.
func safetensorsFile(header any, data []byte) []byte {
	hb, _ := json.Marshal(header)
	var buf bytes.Buffer
	_ = binary.Write(&buf, binary.LittleEndian, uint64(len(hb)))
	buf.Write(hb)
	buf.Write(data)
	return buf.Bytes()
}

func badSafetensors() map[string][]byte {
	good, _ := EncodeSafetensors(lm.InitialParams())
	data := make([]byte, 4*lm.NumParams)
	tensor := func(dtype string, shape, offsets []int) []byte {
		return safetensorsFile(map[string]any{paramsTensor: map[string]any{"dtype": dtype, "shape": shape, "data_offsets": offsets}}, data)
	}
	huge := append([]byte(nil), good...)
	binary.LittleEndian.PutUint64(huge[:8], math.MaxUint64)
	N := int(lm.NumParams)
	return map[string][]byte{
		"empty":                 nil,
		"short":                 good[:7],
		"header past end":       good[:20],
		"huge header length":    huge,
		"header not JSON":       append([]byte{4, 0, 0, 0, 0, 0, 0, 0}, "{{{{"...),
		"header not an object":  safetensorsFile([]int{1, 2}, data),
		"no tensor":             safetensorsFile(map[string]any{"other": map[string]any{}}, data),
		"tensor not an object":  safetensorsFile(map[string]any{paramsTensor: 3}, data),
		"F16":                   tensor("F16", []int{N}, []int{0, 4 * N}),
		"2-d":                   tensor("F32", []int{1, N}, []int{0, 4 * N}),
		"wrong count":           tensor("F32", []int{N - 1}, []int{0, 4 * (N - 1)}),
		"negative shape":        tensor("F32", []int{-1}, []int{0, -4}),
		"data past end":         tensor("F32", []int{N}, []int{4, 4*N + 4}),
		"negative offset":       tensor("F32", []int{N}, []int{-4, 4*N - 4}),
		"offsets mismatch":      tensor("F32", []int{N}, []int{0, 4*N - 4}),
		"one offset":            tensor("F32", []int{N}, []int{4 * N}),
		"truncated data":        good[:len(good)-1],
		"header length 0":       append(make([]byte, 8), data...),
		"offsets wrong order":   tensor("F32", []int{N}, []int{4 * N, 0}),
		"very negative offsets": tensor("F32", []int{N}, []int{math.MinInt64 / 2, math.MinInt64/2 + 4*N}),
	}
}

// TestDecodeSafetensorsBadFiles checks that malformed files are errors,
// not panics.
func TestDecodeSafetensorsBadFiles(t *testing.T) {
	for name, b := range badSafetensors() {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: DecodeSafetensors panicked: %v", name, r)
				}
			}()
			if p, err := DecodeSafetensors(b); err == nil {
				t.Errorf("%s: decoded %v, want an error", name, p)
			}
		}()
	}
}

// FuzzDecodeSafetensors checks that no input makes DecodeSafetensors panic
// and that what it accepts re-encodes to the same parameters.
func FuzzDecodeSafetensors(f *testing.F) {
	good, _ := EncodeSafetensors(lm.InitialParams())
	f.Add(good)
	for _, b := range badSafetensors() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodeSafetensors(b)
		if err != nil {
			return
		}
		if len(p) != int(lm.NumParams) {
			t.Fatalf("accepted %d parameters", len(p))
		}
		again, err := EncodeSafetensors(p)
		if err != nil {
			t.Fatal(err)
		}
		q, err := DecodeSafetensors(again)
		if err != nil {
			t.Fatal(err)
		}
		for i := range p {
			if !(p[i] == q[i] || math.IsNaN(p[i]) && math.IsNaN(q[i])) {
				t.Fatalf("param %d: %v re-decoded as %v", i, p[i], q[i])
			}
		}
	})
}

// TestAdapterArchive checks the archive's layout and that ReadAdapter reads
// what it holds and refuses incomplete directories.
func TestAdapterArchive(t *testing.T) {
	p := lm.InitialParams()
	p[lm.PAnswerTypeMatch] = 1.25
	arc, err := AdapterArchive(p, testBase, 16)
	if err != nil {
		t.Fatal(err)
	}
	gz, err := gzip.NewReader(bytes.NewReader(arc))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tr := tar.NewReader(gz)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeDir {
			if h.Name != "/" || len(files) > 0 {
				t.Fatalf("directory entry %q, want only the root \"/\" first", h.Name)
			}
			continue
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = b
		if err := os.WriteFile(filepath.Join(dir, h.Name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if len(files) != 2 || files["adapter_config.json"] == nil || files["adapter_model.safetensors"] == nil {
		t.Fatalf("archive files: %d", len(files))
	}
	got, err := ReadAdapter(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got[lm.PAnswerTypeMatch] != 1.25 || got[lm.PSearchBias] != -1 {
		t.Errorf("ReadAdapter: %v", got)
	}
	if _, err := ReadAdapter(t.TempDir()); err == nil {
		t.Error("ReadAdapter of an empty directory: no error")
	}
	noWeights := t.TempDir()
	_ = os.WriteFile(filepath.Join(noWeights, "adapter_config.json"), files["adapter_config.json"], 0o644)
	if _, err := ReadAdapter(noWeights); err == nil {
		t.Error("ReadAdapter without adapter_model.safetensors: no error")
	}
}
