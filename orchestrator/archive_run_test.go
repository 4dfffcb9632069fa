package orchestrator

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/sim/weights"
)

// A run on the simulator syncs the trainer's weights with either of
// SkyRL's archive layouts (sim.trainer.archive) and either sync kind: the
// simulated trainer answers SkyRL's tinker://<model_id>/<name>, ArchivePath
// finds the archive under sampler_weights/, and it is opened by its
// content (gzip with a "/" root entry, or a plain tar of ./ entries).
func TestRunSyncsBothArchiveLayouts(t *testing.T) {
	for _, layout := range []string{recipes.SimArchiveJAX, recipes.SimArchiveFSDP} {
		for _, kind := range []string{recipes.SyncLoRA, recipes.SyncSGLangDisk} {
			t.Run(layout+" "+kind, func(t *testing.T) {
				sets := []string{"sim.trainer.archive=" + layout, "sync.kind=" + kind, "policy.urls=embedded,embedded", "eval.datasets.nq="}
				if kind == recipes.SyncSGLangDisk {
					sets = append(sets, "trainer.lora_rank=0", "sim.trainer.backend=fsdp") // full weights, as SkyRL's FSDP backend
				}
				r := testRecipe(t, "", sets...)
				ctx := context.Background()
				deps, emb, err := setup.Connect(ctx, r, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer emb.Close()
				var out bytes.Buffer
				sum, err := (&Runner{Recipe: r, Deps: deps, Out: &out}).Run(ctx)
				if err != nil {
					t.Fatalf("run: %v\n%s", err, out.String())
				}
				a2 := adapterIn(t, r.Output.Dir, 2)
				if len(sum.Steps) != 2 || sum.Steps[1].Adapter != a2 {
					t.Fatalf("steps %+v", sum.Steps)
				}
				archives, _ := filepath.Glob(filepath.Join(r.Trainer.CheckpointsDir, "*", "sampler_weights", a2+".tar.gz"))
				if len(archives) != 1 {
					t.Fatalf("archives %v", archives)
				}
				b, err := os.ReadFile(archives[0])
				if err != nil {
					t.Fatal(err)
				}
				if gz := bytes.HasPrefix(b, []byte{0x1f, 0x8b}); gz != (layout == recipes.SimArchiveJAX) {
					t.Errorf("%s archive is gzip: %v", layout, gz)
				}
				dir, _ := filepath.Abs(filepath.Join(r.Sync.Dir, a2))
				model := filepath.Base(filepath.Dir(filepath.Dir(archives[0])))
				if kind == recipes.SyncLoRA {
					// Adapters are unpacked under the trainer model that
					// saved them (vLLM's prefix cache keys name and path).
					dir, _ = filepath.Abs(filepath.Join(r.Sync.Dir, model, a2))
				}
				for i, p := range emb.Sim().Policies {
					switch kind {
					case recipes.SyncLoRA:
						if a := p.LoadedAdapters(); !slices.Contains(a, a2) {
							t.Errorf("replica %d serves adapters %v", i, a)
						}
					case recipes.SyncSGLangDisk:
						if p.WeightsPath() != dir {
							t.Errorf("replica %d loaded weights from %q, want %s", i, p.WeightsPath(), dir)
						}
					}
				}
				// The unpacked weights are the trained model's (float32).
				synced, err := weights.ReadWeights(dir)
				if err != nil {
					t.Fatal(err)
				}
				trained, _ := emb.Sim().Trainer.ModelParams(model)
				for i := range trained {
					trained[i] = float64(float32(trained[i]))
				}
				if len(trained) == 0 || !slices.Equal(synced, trained) {
					t.Errorf("synced weights %v, trained %v", synced, trained)
				}
				if !strings.Contains(out.String(), "eval step 2 (search, "+a2) {
					t.Errorf("no evaluation of the synced weights:\n%s", out.String())
				}
			})
		}
	}
}
