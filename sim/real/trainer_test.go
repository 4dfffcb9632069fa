package real_test

import (
	"context"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy/tokenizer"
	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/clients/trainer/trainertest"
	"github.com/hindsearch/hindsearch/sim/internal/contracttest"
)

// TestTrainerContractSkyRL runs the trainer role's contract suite,
// unchanged, against the real SkyRL Tinker API server (JAX backend on the
// CPU, a LoRA of rank 8 on the tiny Qwen3 model) behind the fault switch.
func TestTrainerContractSkyRL(t *testing.T) {
	st := realStack(t)
	tk, err := tokenizer.Qwen3()
	if err != nil {
		t.Fatal(err)
	}
	trainertest.Run(t, func(t *testing.T) *trainertest.Backend {
		s := proxied(t, st.SkyRL)
		opts := contracttest.Options(s.URL)
		opts.Timeout = 120 * time.Second
		c, err := trainer.New(opts, "")
		if err != nil {
			t.Fatal(err)
		}
		c.RecoveryTimeout = 60 * time.Second
		t.Cleanup(c.Close)
		return &trainertest.Backend{
			Trainer: unloading(t, c), Checkpoints: c.Checkpoints, BaseModel: st.Name, Rank: 8,
			Tokens: tk.Encode("Question: who wrote The Old Man and the Sea? Answer: <answer> Ernest Hemingway </answer>"),
			// skyrl 0.3.0, the release on PyPI, has no DELETE checkpoint
			// route (it came on 2026-07-16): FastAPI answers 404 "Not Found".
			NoDeleteRoute: true,
			Lose:          func(route string, n int) { s.Fault(t, route, n, "lost") },
			SavePending:   contracttest.SavePending(t, s.URL),
		}
	})
}

// releasing is a Trainer that unloads, when the test ends, every model it
// created: the suite expects a fresh server per subtest, and the real one
// is shared (SkyRL's JAX backend holds at most max_lora_adapters models).
type releasing struct {
	trainer.Trainer
	t *testing.T
}

func unloading(t *testing.T, tr trainer.Trainer) trainer.Trainer {
	return &releasing{Trainer: tr, t: t}
}

// CreateModel creates the model and unloads it when the test ends.
func (r *releasing) CreateModel(ctx context.Context, s *trainer.Session, base string, rank int, seed int64) (string, error) {
	id, err := r.Trainer.CreateModel(ctx, s, base, rank, seed)
	if err == nil {
		r.t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := r.Trainer.UnloadModel(ctx, id); err != nil {
				r.t.Errorf("unloading %s after the test: %v", id, err)
			}
		})
	}
	return id, err
}
