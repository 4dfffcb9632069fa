package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// orchestrate eval --checkpoint loads a sampler archive of either SkyRL
// layout (sim.trainer.archive jax: gzip, root "/"; fsdp: a plain tar of ./
// entries, still named .tar.gz), as an adapter (sync.kind lora) and as
// full weights (sync.kind sglang_disk).
func TestEvalCheckpointBothArchiveLayouts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a training step")
	}
	dir := t.TempDir()
	index := "retriever.index_dir=" + filepath.Join(dir, "index")
	for _, layout := range []string{"jax", "fsdp"} {
		run := filepath.Join(dir, layout, "run")
		stdout, stderr, err := runCLI(t, nil, "run", simRecipe, "--set", "sim.trainer.archive="+layout, "--set", "train.steps=1",
			"--set", "train.batch_size=4", "--set", "eval.per_dataset=1", "--set", "output.dir="+run, "--set", index)
		if err != nil {
			t.Fatalf("%s: run: %v\nstdout:\n%s\nstderr:\n%s", layout, err, stdout, stderr)
		}
		// Step 1's archive, named <recipe>-<model id>-step0001.
		archives, _ := filepath.Glob(filepath.Join(run, "checkpoints", "*", "sampler_weights", "sim-*-step0001.tar.gz"))
		if len(archives) != 1 {
			t.Fatalf("%s: archives %v", layout, archives)
		}
		b, err := os.ReadFile(archives[0])
		if err != nil {
			t.Fatal(err)
		}
		if gz := bytes.HasPrefix(b, []byte{0x1f, 0x8b}); gz != (layout == "jax") {
			t.Errorf("%s: archive is gzip: %v", layout, gz)
		}
		for _, kind := range []string{"lora", "sglang_disk"} {
			out := filepath.Join(dir, layout, "eval-"+kind)
			args := []string{"eval", simRecipe, "--checkpoint", archives[0], "--set", "sync.kind=" + kind,
				"--set", "eval.per_dataset=1", "--set", "output.dir=" + out, "--set", index}
			if kind == "sglang_disk" {
				args = append(args, "--set", "trainer.lora_rank=0", "--set", "sim.trainer.backend=fsdp") // full weights pair with sglang_disk
			}
			stdout, stderr, err := runCLI(t, nil, args...)
			if err != nil {
				t.Fatalf("%s, %s: eval: %v\nstdout:\n%s\nstderr:\n%s", layout, kind, err, stdout, stderr)
			}
			adapter := strings.TrimSuffix(filepath.Base(archives[0]), ".tar.gz")
			model := adapter
			if kind == "sglang_disk" {
				model = "sim/Qwen2.5-3B-Instruct" // full weights, served under the base name
			}
			if want := "eval step 1 (search, " + model + ", greedy)"; !strings.Contains(stdout, want) {
				t.Errorf("%s, %s: no %q in\n%s", layout, kind, want, stdout)
			}
			if _, err := os.Stat(filepath.Join(out, "adapters", adapter)); err != nil {
				t.Errorf("%s, %s: the archive was not unpacked under sync.dir (output.dir/adapters): %v", layout, kind, err)
			}
		}
	}
}
