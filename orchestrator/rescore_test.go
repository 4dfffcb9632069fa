package orchestrator

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/orchestrator/metrics"
	"github.com/hindsearch/hindsearch/orchestrator/rollout"
	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/recipes"
)

// TestPrefillNoiseBiasesSampledOPDAndRescoredRemovesIt samples first turns
// from the embedded policy (searches, mostly) and computes the clamped OPD
// term with a teacher equal to the student: the same model (teacher self)
// and the same context (the hint left out), so that every difference is
// numerical. With sim.policy.prefill_noise 0 the sampled and prefill
// logprobs agree and the term is exactly 0. With noise, the sampled
// student gives a positive mean term on the search tokens (the clamp keeps
// the positive half of zero-mean noise), and the rescored student, scored
// by the same prefill route, gives exactly 0. On the vLLM and the SGLang
// route alike.
func TestPrefillNoiseBiasesSampledOPDAndRescoredRemovesIt(t *testing.T) {
	for _, server := range []string{recipes.ServerVLLM, recipes.ServerSGLang} {
		for _, noise := range []float64{0, 0.3} {
			t.Run(fmt.Sprintf("%s/noise=%v", server, noise), func(t *testing.T) {
				r := testRecipe(t, "", "policy.server="+server, "policy.tokenize=local", fmt.Sprintf("sim.policy.prefill_noise=%v", noise))
				ctx := context.Background()
				deps, emb, err := setup.Connect(ctx, r, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer emb.Close()
				p, tok := deps.Policies[0], deps.Tokenizer
				h := &hinter{loss: recipes.HindsightLossClamp, broadcast: recipes.BroadcastSearch, clamp: 1, phases: metrics.NewPhases()}
				var sampledSum, rescoredSum float64
				searchTokens := 0
				for i, q := range []string{"Who directed the film that won the Palme d'Or in 1994?",
					"In which city was the composer of Carmen born?", "What river flows through the capital of Hungary?"} {
					prompt := tok.Vocab.AppendEncode(nil, tok.Chat([]policy.Message{{Role: "user", Content: format.UserPrompt(q, "")}}, true))
					for s := int64(0); s < 8; s++ {
						seed := 100*int64(i) + s
						comp, err := p.Complete(ctx, policy.CompletionRequest{Model: r.Policy.Model, Prompt: prompt, MaxTokens: 200,
							Sampling: policy.Neutral(), Seed: &seed, Stop: []string{"</search>", "</answer>"}})
						if err != nil {
							t.Fatal(err)
						}
						tr := &rollout.Trajectory{Model: r.Policy.Model, PromptIDs: prompt, Tokens: comp.TokenIDs, Logprobs: comp.Logprobs,
							Policy: make([]bool, len(comp.TokenIDs)), Search: rollout.SearchTokenMask(tok.Vocab, comp.TokenIDs)}
						for j := range tr.Policy {
							tr.Policy[j] = true
						}
						// The teacher context is the student's own: teacherPrompt = its prompt.
						sampled, err := h.opd(ctx, tr, prompt, p, r.Policy.Model, tr.Logprobs)
						if err != nil {
							t.Fatal(err)
						}
						student, err := h.rescore(ctx, tr, p, r.Policy.Model)
						if err != nil {
							t.Fatal(err)
						}
						rescored, err := h.opd(ctx, tr, prompt, p, r.Policy.Model, student)
						if err != nil {
							t.Fatal(err)
						}
						for j, in := range tr.Search {
							if in {
								searchTokens++
								sampledSum += sampled[j]
								rescoredSum += rescored[j]
							}
						}
					}
				}
				if searchTokens < 50 {
					t.Fatalf("only %d search tokens sampled", searchTokens)
				}
				sm, rm := sampledSum/float64(searchTokens), rescoredSum/float64(searchTokens)
				t.Logf("mean OPD term per search token over %d: sampled %.4f, rescored %.4f", searchTokens, sm, rm)
				if rm != 0 {
					t.Errorf("rescored: mean term %v, want exactly 0 (teacher = student)", rm)
				}
				switch {
				case noise == 0 && sm != 0:
					t.Errorf("sampled without noise: mean term %v, want exactly 0", sm)
				case noise > 0 && sm < 0.01:
					t.Errorf("sampled with prefill noise %v: mean term %v, want the clamp's positive bias", noise, sm)
				}
			})
		}
	}
}

// TestRescoredStudentLogprobs runs the embedded loop with
// hindsight.student_logprobs rescored: each critiqued failed trajectory
// costs one extra prefill (counted in the step record, its time in the
// rescore phase). Without prefill noise the prefill and sampling logprobs
// agree, so the datums are those of the sampled default, digest for
// digest. With noise, the datums' logprobs (the GRPO importance ratio's)
// stay the sampling ones: the trainer's first forward_backward is on
// policy, so its loss equals the sampled run's whatever the OPD terms.
func TestRescoredStudentLogprobs(t *testing.T) {
	sampled, _ := runRecipe(t, testRecipe(t, ""), 1)
	rescored, _ := runRecipe(t, testRecipe(t, "", "hindsight.student_logprobs=rescored"), 1)
	if got, want := stepDigests(rescored), stepDigests(sampled); !slices.Equal(got, want) {
		t.Errorf("rescored without noise: batch digests %v, sampled %v", got, want)
	}
	for _, s := range rescored.Steps {
		if s.Rescores == 0 || s.Rescores > s.Critiques {
			t.Errorf("step %d: %d rescores for %d critiques", s.Step, s.Rescores, s.Critiques)
		}
		if _, ok := s.PhaseSeconds["rescore"]; !ok {
			t.Errorf("step %d: no rescore phase in %v", s.Step, s.PhaseSeconds)
		}
	}
	for _, s := range sampled.Steps {
		if _, ok := s.PhaseSeconds["rescore"]; ok || s.Rescores != 0 {
			t.Errorf("sampled step %d: rescore phase or count (%d)", s.Step, s.Rescores)
		}
	}
	// The FSDP backend reports forward_backward metrics (skyrl 0.3.0's JAX
	// backend none).
	noisy, _ := runRecipe(t, testRecipe(t, "", "hindsight.student_logprobs=rescored", "sim.policy.prefill_noise=0.3", "trainer.loss=ppo", "sim.trainer.backend=fsdp"), 1)
	if got, want := stepDigests(noisy)[0], stepDigests(sampled)[0]; got == want {
		t.Errorf("rescored with noise: the first batch is the noiseless one: the OPD terms did not change")
	}
	// The first step trains the weights that sampled it: with the sampling
	// logprobs in the datums every PPO ratio is 1 and nothing is clipped;
	// prefill logprobs (noise sd 0.3) would put many ratios outside
	// [0.8, 1.2].
	if c := noisy.Steps[0].TrainerMetrics["forward_backward/clipped:sum"]; c != 0 {
		t.Errorf("step 1: %v tokens clipped: the datums' logprobs are not the sampling ones", c)
	}
	if noisy.Steps[0].TrainerMetrics["forward_backward/tokens:sum"] == 0 {
		t.Error("step 1: no tokens trained")
	}
}
