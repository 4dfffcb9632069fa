package orchestrator

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/hindsearch/hindsearch/recipes"
)

// backendLoss is a backend's own aggregation of per-token losses l[i][t]
// over a mini-batch, as read in its source (docs/conformance.md, "loss
// normalisation per backend"): SkyRL's FSDP and the hosted service sum
// every token; SkyRL's JAX takes each datum's token mean (its weights sum)
// and optim_step the mean over datums.
func backendLoss(backend string, l [][]float64) float64 {
	sum := 0.0
	for _, seq := range l {
		s := 0.0
		for _, x := range seq {
			s += x
		}
		if backend == recipes.BackendSkyRLJAX {
			s /= float64(len(seq))
		}
		sum += s
	}
	if backend == recipes.BackendSkyRLJAX {
		sum /= float64(len(l))
	}
	return sum
}

// referenceLoss is the aggregation verl computes (core_algos.py agg_loss),
// written out for each loss_agg.
func referenceLoss(agg string, l [][]float64) float64 {
	total, n := 0.0, 0
	seqMeans, seqSums := 0.0, 0.0
	for _, seq := range l {
		s := 0.0
		for _, x := range seq {
			s += x
		}
		total += s
		n += len(seq)
		seqMeans += s / float64(len(seq))
		seqSums += s
	}
	switch agg {
	case recipes.LossAggTokenMean:
		return total / float64(n)
	case recipes.LossAggSeqMeanTokenMean:
		return seqMeans / float64(len(l))
	case recipes.LossAggSeqMeanTokenSum:
		return seqSums / float64(len(l))
	}
	return total
}

// Scaling each datum's advantages by lossScale makes every backend's own
// aggregation of the (linear) per-token losses equal verl's aggregation
// of the unscaled ones, on random mini-batches of uneven lengths.
func TestLossScaleMakesEveryBackendComputeTheRecipesAggregation(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	aggs := []string{recipes.LossAggTokenMean, recipes.LossAggSeqMeanTokenMean, recipes.LossAggSeqMeanTokenSum, recipes.LossAggSum}
	backends := []string{recipes.BackendSkyRLJAX, recipes.BackendSkyRLFSDP, recipes.BackendHosted}
	for trial := 0; trial < 20; trial++ {
		b := 1 + rng.IntN(9)
		l := make([][]float64, b)
		n := 0
		for i := range l {
			l[i] = make([]float64, 1+rng.IntN(300))
			for t := range l[i] {
				l[i][t] = rng.NormFloat64()
			}
			n += len(l[i])
		}
		for _, agg := range aggs {
			want := referenceLoss(agg, l)
			for _, be := range backends {
				scaled := make([][]float64, b)
				for i, seq := range l {
					s := lossScale(agg, be, len(seq), b, n)
					for _, x := range seq {
						scaled[i] = append(scaled[i], s*x)
					}
				}
				if got := backendLoss(be, scaled); math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
					t.Fatalf("%s on %s, %d datums: backend computes %v, verl %v", agg, be, b, got, want)
				}
				if recipes.NativeAgg(agg, be) != (lossScale(agg, be, 7, 3, 50) == 1 && lossScale(agg, be, 2, 5, 9) == 1) {
					t.Errorf("recipes.NativeAgg(%s, %s) = %v disagrees with lossScale", agg, be, recipes.NativeAgg(agg, be))
				}
			}
		}
	}
}

// verl's constant schedule with warmup (torch_functional.py
// get_constant_schedule_with_warmup, stepped once per training step from
// 0): 0 at step 1, linear, full at step warmup+1 and after.
func TestLearningRateWarmsUpAsVerl(t *testing.T) {
	r := &recipes.Recipe{Trainer: recipes.Trainer{LearningRate: 1e-6, LRWarmupSteps: 286}}
	for _, c := range []struct {
		step int
		want float64
	}{{1, 0}, {2, 1e-6 / 286}, {144, 1e-6 * 143 / 286}, {287, 1e-6}, {300, 1e-6}} {
		if got := learningRate(r, c.step); math.Abs(got-c.want) > 1e-18 {
			t.Errorf("step %d: lr %v, want %v", c.step, got, c.want)
		}
	}
	r.Trainer.LRWarmupSteps = 0
	if got := learningRate(r, 1); got != 1e-6 {
		t.Errorf("no warmup: step 1 lr %v", got)
	}
}

// torch.std is unbiased (n-1): for one success in five the advantages are
// (r-0.2)/sqrt(0.2), 1/1.118 of the population std's.
func TestGroupAdvantagesUnbiasedStd(t *testing.T) {
	rs := []float64{1, 0, 0, 0, 0}
	u, p := GroupAdvantages(rs, true), GroupAdvantages(rs, false)
	if want := 0.8 / math.Sqrt(0.2); math.Abs(u[0]-want) > 1e-5 {
		t.Errorf("unbiased: %v, want %v", u[0], want)
	}
	if ratio := p[0] / u[0]; math.Abs(ratio-math.Sqrt(5.0/4)) > 1e-5 {
		t.Errorf("population/unbiased = %v, want sqrt(5/4)", ratio)
	}
}

// The KL term is verl's low_var_kl and its gradient at ratio 1; it is
// zero at the reference and inert beyond verl's clamp.
func TestKLTerm(t *testing.T) {
	if kl, a := KLTerm(-1.3, -1.3); kl != 0 || a != 0 {
		t.Errorf("at the reference: kl %v adv %v", kl, a)
	}
	old, ref := -2.0, -1.5
	kl, a := KLTerm(old, ref)
	if want := math.Exp(0.5) - 0.5 - 1; math.Abs(kl-want) > 1e-12 {
		t.Errorf("kl %v, want %v", kl, want)
	}
	// The loss adds kl_coef*kl; a policy-gradient loss is -A*logprob, so
	// the advantage carrying it is minus kl's derivative in the logprob.
	h := 1e-6
	k2, _ := KLTerm(old+h, ref)
	if grad := (k2 - kl) / h; math.Abs(a+grad) > 1e-4 {
		t.Errorf("advantage %v, want minus the estimate's derivative in the logprob %v", a, -grad)
	}
	if a <= 0 {
		t.Errorf("advantage %v: a token the reference finds likelier (ref > old) must be pushed up", a)
	}
	if kl, a := KLTerm(-20, -1); kl != klClamp || a != 0 {
		t.Errorf("beyond the clamp: kl %v adv %v", kl, a)
	}
}

// Under hindsight.term_agg search-mean each datum's term added at
// termScale after lossScale makes every backend compute the recipe's
// aggregation of the policy loss plus coef times the term's mean over the
// mini-batch's term tokens (L_PPO + coef * L_OPD), whatever the lengths.
func TestTermScaleAddsTheTermsMeanOnEveryBackend(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	aggs := []string{recipes.LossAggTokenMean, recipes.LossAggSeqMeanTokenMean, recipes.LossAggSeqMeanTokenSum, recipes.LossAggSum}
	backends := []string{recipes.BackendSkyRLJAX, recipes.BackendSkyRLFSDP, recipes.BackendHosted}
	const coef = 0.01
	for trial := 0; trial < 20; trial++ {
		b := 1 + rng.IntN(9)
		l := make([][]float64, b)
		d := make([][]float64, b) // the term, 0 off the term tokens
		n, terms, dSum := 0, make([]int, b), 0.0
		for i := range l {
			l[i] = make([]float64, 1+rng.IntN(300))
			d[i] = make([]float64, len(l[i]))
			failed := rng.IntN(2) == 0
			for t := range l[i] {
				l[i][t] = rng.NormFloat64()
				if failed && rng.IntN(4) == 0 { // a search token
					terms[i]++
					if rng.IntN(2) == 0 { // the teacher more confident
						d[i][t] = rng.Float64()
						dSum += d[i][t]
					}
				}
			}
			n += len(l[i])
		}
		T := 0
		for _, k := range terms {
			T += k
		}
		for _, agg := range aggs {
			want := referenceLoss(agg, l)
			if T > 0 {
				want += coef * dSum / float64(T)
			}
			for _, be := range backends {
				scaled := make([][]float64, b)
				for i, seq := range l {
					s, k := lossScale(agg, be, len(seq), b, n), termScale(coef, be, len(seq), b, T)
					for t, x := range seq {
						scaled[i] = append(scaled[i], s*x+k*d[i][t])
					}
				}
				if got := backendLoss(be, scaled); math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
					t.Fatalf("%s on %s, %d datums, %d term tokens: backend computes %v, want %v", agg, be, b, T, got, want)
				}
			}
		}
	}
}
