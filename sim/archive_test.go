package sim

import (
	"bytes"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/sim/weights"
)

// PackArchive refuses an unknown layout and names that are not plain file
// names; sim.Start refuses an unknown trainer layout.
func TestPackArchiveRefuses(t *testing.T) {
	if _, err := weights.PackArchive("zip", map[string][]byte{"a": nil}); err == nil || !strings.Contains(err.Error(), `"zip"`) {
		t.Errorf("unknown layout: %v", err)
	}
	for _, n := range []string{"", ".", "..", "a/b", "../a", "/a"} {
		if _, err := weights.PackArchive(weights.ArchiveFSDP, map[string][]byte{n: nil}); err == nil {
			t.Errorf("file name %q accepted", n)
		}
	}
	if s, err := Start(Config{BaseModel: testBase, Trainer: true, TrainerArchive: "zip"}); err == nil {
		s.Close()
		t.Error("Start with trainer archive layout zip: no error")
	}
	// The same content packs to the same bytes.
	a, _ := weights.PackArchive(weights.ArchiveJAX, map[string][]byte{"x": []byte("1"), "y": []byte("2")})
	b, _ := weights.PackArchive(weights.ArchiveJAX, map[string][]byte{"y": []byte("2"), "x": []byte("1")})
	if !bytes.Equal(a, b) {
		t.Error("weights.PackArchive is not deterministic")
	}
}

// The simulated trainer's archives load into the simulated policy from
// either layout, once unpacked (as the orchestrator's sync does).
func TestSimTrainerArchivesLoadIntoPolicy(t *testing.T) {
	f := getFixture(t)
	for _, layout := range weights.ArchiveLayouts {
		want := distinctParams(0.01)
		arc, err := weights.PackAdapter(layout, want, testBase, 8)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "w")
		unpackBytes(t, arc, dir)
		_, c := newPolicy(t, f)
		if st, body := c.Post("/update_weights_from_disk", map[string]any{"model_path": dir}); st != http.StatusOK {
			t.Errorf("%s: update_weights_from_disk %d %v", layout, st, body)
		}
		if st, body := c.Post("/v1/load_lora_adapter", map[string]any{"lora_name": "a", "lora_path": dir}); st != http.StatusOK {
			t.Errorf("%s: load_lora_adapter %d %v", layout, st, body)
		}
	}
}
