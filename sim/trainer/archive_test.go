package trainer

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/hindsearch/hindsearch/sim/lm"
	"github.com/hindsearch/hindsearch/sim/weights"
)

// archiveEntries lists an archive's entries as "name type", and whether it
// is a gzip stream; compressedLen and plainLen are the gzip stream's size
// and the tar's inside it.
func archiveEntries(t *testing.T, b []byte) (entries []string, gzipped bool, compressedLen, plainLen int) {
	t.Helper()
	plain := b
	if bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if plain, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
		gzipped = true
	}
	tr := tar.NewReader(bytes.NewReader(plain))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, h.Name+" "+string(h.Typeflag))
	}
	return entries, gzipped, len(b), len(plain)
}

// skyrlEntries are the entries Python's tarfile writes for each SkyRL
// backend over a directory holding the simulator's adapter files: the JAX
// backend's tar.add(dir, arcname="") makes the root "/", the FSDP
// backend's tar.add(dir, arcname=".") makes it "./".
var skyrlEntries = map[weights.ArchiveLayout][]string{
	weights.ArchiveJAX:  {"/ 5", "adapter_config.json 0", "adapter_model.safetensors 0"},
	weights.ArchiveFSDP: {"./ 5", "./adapter_config.json 0", "./adapter_model.safetensors 0"},
}

// The simulated trainer answers save_weights_for_sampler with SkyRL's
// path, tinker://<model_id>/<name>, and writes the archive where SkyRL
// does, under sampler_weights/, packed like the backend Archive names: the
// JAX layout a gzip stream stored at level 0 with the root entry "/", the
// FSDP layout an uncompressed tar of ./ entries under the same name.
func TestSimTrainerSaveWeightsForSamplerIsSkyRLs(t *testing.T) {
	f := getFixture(t)
	for _, layout := range []weights.ArchiveLayout{"", weights.ArchiveJAX, weights.ArchiveFSDP} {
		t.Run("layout "+string(layout), func(t *testing.T) {
			ts, c, ckpt := newTrainer(t, f)
			ts.Archive = layout
			mid := createModel(c, createSession(c), 0)
			res := c.Call("/api/v1/save_weights_for_sampler", map[string]any{"model_id": mid, "path": "hs-step0001", "seq_id": 1, "type": "save_weights_for_sampler"})
			if want := "tinker://" + mid + "/hs-step0001"; res["path"] != want || res["type"] != "save_weights_for_sampler" {
				t.Errorf("answer %v, want path %s", res, want)
			}
			if _, err := os.Stat(filepath.Join(ckpt, mid, "hs-step0001.tar.gz")); !os.IsNotExist(err) {
				t.Errorf("an archive where the answer's path would put it without sampler_weights/ (stat: %v)", err)
			}
			archive := filepath.Join(ckpt, mid, "sampler_weights", "hs-step0001.tar.gz")
			b, err := os.ReadFile(archive)
			if err != nil {
				t.Fatal(err)
			}
			want := weights.ArchiveJAX
			if layout == weights.ArchiveFSDP {
				want = weights.ArchiveFSDP
			}
			entries, gzipped, zlen, plen := archiveEntries(t, b)
			if !slices.Equal(entries, skyrlEntries[want]) || gzipped != (want == weights.ArchiveJAX) {
				t.Errorf("archive: gzip %v, entries %q; want gzip %v, %q", gzipped, entries, want == weights.ArchiveJAX, skyrlEntries[want])
			}
			if gzipped && zlen <= plen {
				t.Errorf("gzip stream of %d bytes for a %d-byte tar: compressed, want level 0 (stored)", zlen, plen)
			}
			dir := t.TempDir()
			unpackArchive(t, archive, dir)
			got, err := weights.ReadAdapter(dir)
			// The adapter stores float32 (as PEFT's does).
			trained, _ := ts.ModelParams(mid)
			for i := range trained {
				trained[i] = float64(float32(trained[i]))
			}
			if err != nil || !reflect.DeepEqual(got, trained) {
				t.Errorf("adapter %v (%v), want the model's %v", got, err, trained)
			}
		})
	}
}

// save_weights answers tinker://<model_id>/weights/<name> and writes the
// training state where SkyRL's engine.py process_save_weights does,
// <checkpoints>/<model_id>/<name>.tar.gz (no weights/ directory), in the
// layout Archive names; load_weights of that path into a fresh model
// restores it.
func TestSimTrainerSaveWeightsWritesWhereSkyRLDoes(t *testing.T) {
	f := getFixture(t)
	tr := trainTrajectory(t, f, 7)
	for _, layout := range []weights.ArchiveLayout{weights.ArchiveJAX, weights.ArchiveFSDP} {
		t.Run(string(layout), func(t *testing.T) {
			ts, c, ckpt := newTrainer(t, f)
			ts.Archive = layout
			session := createSession(c)
			src := createModel(c, session, 0)
			c.Call("/api/v1/forward_backward", fbBody(src, 1, "importance_sampling", nil, datum(tr, 1, 0)))
			c.Call("/api/v1/optim_step", optimBody(src, 2, 0.05))
			res := c.Call("/api/v1/save_weights", map[string]any{"model_id": src, "path": "state-0001", "seq_id": 3, "type": "save_weights"})
			path := "tinker://" + src + "/weights/state-0001"
			if res["path"] != path {
				t.Errorf("answer %v, want path %s", res, path)
			}
			b, err := os.ReadFile(filepath.Join(ckpt, src, "state-0001.tar.gz"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(ckpt, src, "weights")); !os.IsNotExist(err) {
				t.Errorf("a weights/ directory under the model (stat: %v)", err)
			}
			entries, gzipped, _, _ := archiveEntries(t, b)
			root, prefix := "/", ""
			if layout == weights.ArchiveFSDP {
				root, prefix = "./", "./"
			}
			if want := []string{root + " 5", prefix + stateFile + " 0"}; !slices.Equal(entries, want) || gzipped != (layout == weights.ArchiveJAX) {
				t.Errorf("state archive: gzip %v, entries %q, want %q", gzipped, entries, want)
			}
			dst := createModel(c, session, 1)
			c.Call("/api/v1/load_weights", map[string]any{"model_id": dst, "path": path, "optimizer": true, "seq_id": 1, "type": "load_weights"})
			want, _ := ts.ModelParams(src)
			if got, _ := ts.ModelParams(dst); !reflect.DeepEqual(got, want) || reflect.DeepEqual(got, lm.InitialParams()) {
				t.Errorf("loaded params %v, want the trained %v", got, want)
			}
		})
	}
}
