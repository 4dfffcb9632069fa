package doctor

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/orchestrator/setup"
)

// The sampled vs prefill row measures the simulated prefill noise: with
// sim.policy.prefill_noise 0.3 it reports a clamp bias well above the
// threshold and warns, naming hindsight.student_logprobs=rescored; with
// rescored the same measurement is OK; without noise (the embedded
// default, TestDoctorEmbeddedDefault) it is OK with a bias of 0.
func TestDoctorSampledVsPrefillRow(t *testing.T) {
	for _, tc := range []struct {
		sets []string
		want CheckStatus
	}{
		{[]string{"sim.policy.prefill_noise=0.3"}, CheckWarn},
		{[]string{"sim.policy.prefill_noise=0.3", "hindsight.student_logprobs=rescored"}, CheckOK},
		{[]string{"sim.policy.prefill_noise=0.3", "policy.server=sglang", "policy.tokenize=local"}, CheckWarn},
	} {
		r := testRecipe(t, "", tc.sets...)
		deps, emb, err := setup.Connect(context.Background(), r, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		rep := Run(context.Background(), r, deps, Options{})
		emb.Close()
		var row *Check
		for i := range rep.Checks {
			if rep.Checks[i].Name == prefillRow {
				row = &rep.Checks[i]
				break
			}
		}
		if row == nil {
			t.Fatalf("%v: no %s row:\n%s", tc.sets, prefillRow, report(t, rep))
		}
		if row.Status != tc.want || !strings.Contains(row.Detail, "clamp bias") {
			t.Errorf("%v: %s %q, want %s", tc.sets, row.Status, row.Detail, tc.want)
		}
		if tc.want == CheckWarn && !strings.Contains(row.Fix, "hindsight.student_logprobs: rescored") {
			t.Errorf("%v: fix %q does not name rescored", tc.sets, row.Fix)
		}
	}
}

// prefillStats: the mean, the mean absolute difference, and the mean of
// each difference clamped to [0, c].
func TestPrefillStatsClampBias(t *testing.T) {
	d := []float64{-0.3, -0.1, 0.1, 0.3, 2}
	mean, abs, bias := prefillStats(d, 1)
	if math.Abs(mean-0.4) > 1e-12 || math.Abs(abs-0.56) > 1e-12 || math.Abs(bias-(0.1+0.3+1)/5) > 1e-12 {
		t.Errorf("mean %v abs %v bias %v", mean, abs, bias)
	}
}
