package real_test

import (
	"math"
	"testing"

	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/sim/internal/contracttest"
)

// TestSkyRLJAXSharesTheTrainingSlot shows the source audit's B1 on the
// real SkyRL (JAX backend): sampling an older sampler checkpoint of a
// model overwrites the weights it trains, so a save made after it holds
// the older weights. sim/trainer's TestJAXSharesTheTrainingSlot holds the
// simulator to the same experiment.
func TestSkyRLJAXSharesTheTrainingSlot(t *testing.T) {
	st := realStack(t)
	tk := qwen3(t)
	tc, err := trainer.New(options(st.SkyRL), "")
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	got := contracttest.SharedSlot(t, tc, st.Name, tk, tk.Encode(contracttest.SlotText), 0.05)
	t.Logf("SkyRL JAX: mean prompt logprob W1 %.4f, W2 %.4f, saved after sampling W1 again %.4f", got.W1, got.W2, got.After)
	if math.Abs(got.W1-got.W2) < 1e-3 {
		t.Fatalf("the second step did not change the weights (%+v): the experiment shows nothing", got)
	}
	if math.Abs(got.After-got.W1) > 1e-4 {
		t.Errorf("SkyRL: the save after sampling W1 again is not W1 (%+v): B1 no longer holds; update docs/conformance.md and the simulator", got)
	}
}
