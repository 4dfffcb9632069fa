package trainer

import (
	"math"
	"testing"

	"github.com/hindsearch/hindsearch/sim/lm"
)

// adamBody is an optim_step body whose first Adam step is
// -lr * g / (|g| + eps) per parameter (beta1 = beta2 = 0, no weight decay),
// so that with a large eps the step is nearly proportional to the gradient
// and shows its scale.
func adamBody(model string, seq int, lr, eps float64) map[string]any {
	return map[string]any{"model_id": model, "seq_id": seq, "type": "optim_step",
		"adam_params": map[string]any{"learning_rate": lr, "beta1": 0.0, "beta2": 0.0, "eps": eps, "weight_decay": 0.0}}
}

// ascent is a datum's importance-sampling ascent direction under the
// initial parameters, sum over its policy tokens of ratio * adv * grad log
// p, with the sampling logprobs rounded to float32 as datum sends them, and
// its number of weighted tokens.
func ascent(f *fixture, tr trajectory, adv float64) ([]float64, int) {
	pos := tr.PolicyPositions()
	lps := f.model.Score(lm.InitialParams(), tr.IDs)
	coef := make([]float64, len(pos))
	for j, p := range pos {
		coef[j] = math.Exp(lps[p]-float64(float32(tr.Logprobs[p]))) * adv
	}
	g := make([]float64, lm.NumParams)
	f.model.LogProbGrad(lm.InitialParams(), tr.IDs, pos, coef, g)
	return g, len(pos)
}

// TestSimTrainerLossNormalisationFollowsBackend trains two datums of
// different lengths, sent in two forward_backward calls of one step, and
// checks the gradient optim_step applies against one computed by hand from
// the model's per-datum gradients: under the JAX backend the mean over the
// datums of each datum's token mean (jax.py loss_for_lora,
// AccumulatedGradients.get_mean), under FSDP the token sum over the whole
// step (skyrl_train_backend.py _to_training_batch, ppo_utils.py), small
// enough here that the 1.0 clip does not act.
func TestSimTrainerLossNormalisationFollowsBackend(t *testing.T) {
	f := getFixture(t)
	tr1, tr2 := trainTrajectory(t, f, 7), trainTrajectory(t, f, 12)
	a1, a2 := 0.004, -0.001 // small: the FSDP sum stays under the clip
	g1, n1 := ascent(f, tr1, a1)
	g2, n2 := ascent(f, tr2, a2)
	if n1 == n2 {
		t.Fatalf("both trajectories have %d policy tokens: pick datums of different lengths", n1)
	}
	for _, tc := range []struct {
		backend Backend
		want    func(j int) float64 // the loss gradient
	}{
		{BackendJAX, func(j int) float64 { return -(g1[j]/float64(n1) + g2[j]/float64(n2)) / 2 }},
		{BackendFSDP, func(j int) float64 { return -(g1[j] + g2[j]) }},
	} {
		ts, c, _ := newTrainer(t, f)
		ts.Backend = tc.backend
		mid := createModel(c, createSession(c), 0)
		c.Call("/api/v1/forward_backward", fbBody(mid, 1, "importance_sampling", nil, datum(tr1, a1, 0)))
		c.Call("/api/v1/forward_backward", fbBody(mid, 2, "importance_sampling", nil, datum(tr2, a2, 0)))
		const lr, eps = 1e-3, 10.0
		res := c.Call("/api/v1/optim_step", adamBody(mid, 3, lr, eps))
		norm := 0.0
		for j := 0; j < lm.NumParams; j++ {
			norm += tc.want(j) * tc.want(j)
		}
		norm = math.Sqrt(norm)
		if tc.backend == BackendFSDP && norm >= 1 {
			t.Fatalf("fsdp: hand gradient norm %v reaches the clip: use smaller advantages", norm)
		}
		if got := metric(t, res, "grad_norm"); math.Abs(got-norm) > 1e-9*(1+norm) {
			t.Errorf("%s: grad_norm %v, hand-computed %v", tc.backend, got, norm)
		}
		p, _ := ts.ModelParams(mid)
		init := lm.InitialParams()
		for j := 0; j < lm.NumParams; j++ {
			g := tc.want(j)
			want := init[j] - lr*g/(math.Abs(g)+eps)
			if math.Abs(p[j]-want) > 1e-12+1e-9*math.Abs(want-init[j]) {
				t.Errorf("%s: parameter %d = %.15g after the step, want %.15g (gradient %.6g)", tc.backend, j, p[j], want, g)
			}
		}
	}
}

// TestSimTrainerFSDPClipsGradientNorm checks that under the FSDP backend
// optim_step scales a gradient whose L2 norm is above 1.0 down to norm 1
// before Adam (fsdp_strategy.py optimizer_step, max_grad_norm 1.0) and
// reports the norm before clipping, and that the JAX backend does not clip.
func TestSimTrainerFSDPClipsGradientNorm(t *testing.T) {
	f := getFixture(t)
	tr := trainTrajectory(t, f, 7)
	const adv = 5.0
	g, n := ascent(f, tr, adv)
	for _, backend := range []Backend{BackendFSDP, BackendJAX} {
		want := make([]float64, lm.NumParams) // the loss gradient before any clip
		norm := 0.0
		for j := range want {
			want[j] = -g[j]
			if backend == BackendJAX {
				want[j] /= float64(n)
			}
			norm += want[j] * want[j]
		}
		norm = math.Sqrt(norm)
		scale := 1.0
		if backend == BackendFSDP {
			if norm <= 2 {
				t.Fatalf("fsdp: gradient norm %v: want one well above the clip", norm)
			}
			scale = 1 / (norm + 1e-6)
		}
		ts, c, _ := newTrainer(t, f)
		ts.Backend = backend
		mid := createModel(c, createSession(c), 0)
		c.Call("/api/v1/forward_backward", fbBody(mid, 1, "importance_sampling", nil, datum(tr, adv, 0)))
		const lr, eps = 1e-3, 10.0
		res := c.Call("/api/v1/optim_step", adamBody(mid, 2, lr, eps))
		if got := metric(t, res, "grad_norm"); math.Abs(got-norm) > 1e-9*(1+norm) {
			t.Errorf("%s: grad_norm %v, want the unclipped %v", backend, got, norm)
		}
		p, _ := ts.ModelParams(mid)
		init := lm.InitialParams()
		for j := range want {
			gj := want[j] * scale
			w := init[j] - lr*gj/(math.Abs(gj)+eps)
			if math.Abs(p[j]-w) > 1e-12+1e-9*math.Abs(w-init[j]) {
				t.Errorf("%s: parameter %d = %.15g, want %.15g (applied gradient %.6g)", backend, j, p[j], w, gj)
			}
		}
	}
}
