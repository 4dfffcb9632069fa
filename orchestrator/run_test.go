package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/judge"
	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/orchestrator/doctor"
	"github.com/hindsearch/hindsearch/orchestrator/internal/testkit"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/orchestrator/rollout"
	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/results"
)

// dataDir is the shipped data.
var dataDir = testkit.DataDir

func TestMain(m *testing.M) { os.Exit(testkit.Main(m)) }

// testRecipe is testkit.Recipe.
func testRecipe(t *testing.T, body string, sets ...string) *recipes.Recipe {
	t.Helper()
	return testkit.Recipe(t, body, sets...)
}

// stepDigests lists a run's batch digests, step by step.
func stepDigests(sum *Summary) []string {
	var ds []string
	for _, s := range sum.Steps {
		ds = append(ds, s.BatchDigest)
	}
	return ds
}

// runRecipe runs r against freshly started embedded servers.
func runRecipe(t *testing.T, r *recipes.Recipe, sign float64) (*Summary, string) {
	t.Helper()
	return runRecipeWith(t, r, sign, nil)
}

// runRecipeWith is runRecipe with wrap (when not nil) changing the
// clients before the run (a recorder in front of a server, say).
func runRecipeWith(t *testing.T, r *recipes.Recipe, sign float64, wrap func(*roles.Deps, *setup.Embedded)) (*Summary, string) {
	t.Helper()
	ctx := context.Background()
	deps, emb, err := setup.Connect(ctx, r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	if wrap != nil {
		wrap(&deps, emb)
	}
	var out bytes.Buffer
	rn := &Runner{Recipe: r, Deps: deps, Out: &out, advantageSign: sign}
	sum, err := rn.Run(ctx)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	return sum, out.String()
}

// interruptThenResume runs r until step stopAfter is recorded, cancels it
// (the next step is cut short), then resumes it on a fresh set of embedded
// servers, as after a crash of everything. It returns the resumed run's
// summary and output, and its servers (closed when the test ends).
func interruptThenResume(t *testing.T, r *recipes.Recipe, stopAfter int) (*Summary, string, roles.Deps, *setup.Embedded) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	deps, emb, err := setup.Connect(context.Background(), r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rn := &Runner{Recipe: r, Deps: deps, afterStep: func(step int) {
		if step == stopAfter {
			cancel()
		}
	}}
	if _, err := rn.Run(ctx); err == nil {
		t.Fatal("the interrupted run did not fail")
	}
	emb.Close()
	deps, emb, err = setup.Connect(context.Background(), r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)
	var out bytes.Buffer
	got, err := (&Runner{Recipe: r, Deps: deps, Resume: true, Out: &out}).Run(context.Background())
	if err != nil {
		t.Fatalf("resume: %v\n%s", err, out.String())
	}
	return got, out.String(), deps, emb
}

func TestEndToEndOverLoopback(t *testing.T) {
	r := testRecipe(t, "")
	sum, out := runRecipe(t, r, 1)
	dir := r.Output.Dir

	// The output contract: steps.jsonl, eval.jsonl, recipe.yaml.
	rd := &results.RunDir{Path: dir}
	steps, err := rd.ReadSteps()
	if err != nil || len(steps) != 2 {
		t.Fatalf("steps.jsonl: %v, %d records", err, len(steps))
	}
	raw, err := os.ReadFile(filepath.Join(dir, "steps.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var first map[string]any
	if err := json.Unmarshal([]byte(strings.SplitN(string(raw), "\n", 2)[0]), &first); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"step", "reward_mean", "failed", "critiques", "opd_tokens", "phase_seconds", "batch_digest"} {
		if _, ok := first[k]; !ok {
			t.Errorf("steps.jsonl lacks %q", k)
		}
	}
	ph := first["phase_seconds"].(map[string]any)
	for _, k := range []string{"rollout", "judge", "teacher", "train", "sync", "eval"} {
		if _, ok := ph[k]; !ok {
			t.Errorf("phase_seconds lacks %q", k)
		}
	}
	for _, s := range steps {
		if len(s.BatchDigest) != 64 || s.Trajectories != 16 || !s.Simulated {
			t.Errorf("step %d: digest %q, %d trajectories, simulated %v", s.Step, s.BatchDigest, s.Trajectories, s.Simulated)
		}
		if s.Failed > 0 && s.Critiques+s.CritiqueFailures != s.Failed {
			t.Errorf("step %d: %d failed but %d critiques + %d failures", s.Step, s.Failed, s.Critiques, s.CritiqueFailures)
		}
		// policy.affinity trajectory (the default): every trajectory's
		// first turn pins it, its later turns and rescoring hit the pin.
		if a := s.Affinity; a == nil || a.Pinned < int64(s.Trajectories) || a.Hits == 0 || a.Lost != 0 {
			t.Errorf("step %d: affinity %+v", s.Step, a)
		}
	}
	evals, err := rd.ReadEval()
	if err != nil {
		t.Fatal(err)
	}
	// Evaluations at steps 0 and 2, two datasets each.
	if len(evals) != 4 || len(sum.Evals) != 4 {
		t.Fatalf("eval.jsonl: %d records, summary %d", len(evals), len(sum.Evals))
	}
	for _, e := range evals {
		if e.Strategy != "search" || e.N != 4 || (e.Step != 0 && e.Step != 2) {
			t.Errorf("eval record %+v", e)
		}
	}
	saved, err := os.ReadFile(filepath.Join(dir, "recipe.yaml"))
	if err != nil || !strings.Contains(string(saved), "gold_answer: true") {
		t.Fatalf("recipe.yaml: %v\n%s", err, saved)
	}
	for _, f := range []string{"state.json", results.TrainingCurvesFile, results.HealthCurvesFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	tr, err := os.ReadFile(filepath.Join(dir, "trajectories", "step-0002.jsonl"))
	if err != nil || strings.Count(string(tr), "\n") != 6 {
		t.Errorf("kept trajectories: %v, %d lines", err, strings.Count(string(tr), "\n"))
	}
	// Progress per step, the table with its caption, the simulator label.
	for _, want := range []string{"step   1/2", "step   2/2", "| step |", "HotpotQA", "hindsight=on gold=on", "SIMULATED"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// A second run into the same directory is refused, and nothing is lost.
	deps, emb, err := setup.Connect(context.Background(), r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	_, err = (&Runner{Recipe: r, Deps: deps}).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "--overwrite") {
		t.Fatalf("second run into the same dir: %v", err)
	}
	again, _ := os.ReadFile(filepath.Join(dir, "steps.jsonl"))
	if !bytes.Equal(again, raw) {
		t.Error("a refused run changed steps.jsonl")
	}
}

func TestAblationSwitchesShowInCaptionAndRecipe(t *testing.T) {
	for _, tc := range []struct {
		sets    []string
		caption string
		saved   string
	}{
		{[]string{"hindsight.enabled=false"}, "hindsight=off", "enabled: false"},
		{[]string{"hindsight.gold_answer=false"}, "gold=off", "gold_answer: false"},
	} {
		t.Run(tc.caption, func(t *testing.T) {
			r := testRecipe(t, "", append(tc.sets, "train.steps=1", "eval.every=1")...)
			sum, out := runRecipe(t, r, 1)
			if !strings.Contains(out, tc.caption) {
				t.Errorf("caption lacks %q:\n%s", tc.caption, out)
			}
			saved, _ := os.ReadFile(filepath.Join(r.Output.Dir, "recipe.yaml"))
			if !strings.Contains(string(saved), tc.saved) {
				t.Errorf("recipe.yaml lacks %q", tc.saved)
			}
			if tc.caption == "hindsight=off" && sum.Steps[0].Critiques != 0 {
				t.Errorf("hindsight off but %d critiques", sum.Steps[0].Critiques)
			}
		})
	}
}

// The batches sent to the trainer do not depend on rollout concurrency.
func TestDigestsIndependentOfConcurrency(t *testing.T) {
	var digests [2][]string
	for i, conc := range []string{"policy.concurrency=1", "policy.concurrency=16"} {
		r := testRecipe(t, "", conc, "judge.concurrency="+strings.TrimPrefix(conc, "policy.concurrency="), "eval.datasets.nq=", "eval.datasets.hotpotqa=")
		sum, _ := runRecipe(t, r, 1)
		digests[i] = stepDigests(sum)
	}
	if strings.Join(digests[0], ",") != strings.Join(digests[1], ",") {
		t.Fatalf("digests differ with concurrency:\n%v\n%v", digests[0], digests[1])
	}
}

// A flipped advantage sign must make the simulated policy worse, not better:
// the learning signal reaches the trainer with the right sign.
func TestFlippedAdvantageSignMakesPolicyWorse(t *testing.T) {
	if testing.Short() {
		t.Skip("trains twice")
	}
	sets := []string{"train.steps=20", "train.batch_size=16", "train.group_size=5", "trainer.learning_rate=0.3",
		"hindsight.enabled=false", "eval.every=20", "eval.per_dataset=80", "eval.datasets.nq=",
		"policy.concurrency=16", "output.trajectories=0"}
	finalEM := map[float64]float64{}
	var initialEM float64
	lateReward := map[float64]float64{}
	var earlyReward float64 // the first two steps sample the same policy either way
	for _, sign := range []float64{1, -1} {
		r := testRecipe(t, "", sets...)
		sum, _ := runRecipe(t, r, sign)
		initialEM = sum.Evals[0].EM
		finalEM[sign] = sum.Evals[len(sum.Evals)-1].EM
		earlyReward = (sum.Steps[0].RewardMean + sum.Steps[1].RewardMean) / 2
		for _, s := range sum.Steps[len(sum.Steps)-4:] {
			lateReward[sign] += s.RewardMean / 4
		}
	}
	t.Logf("greedy EM: initial %.3f, trained %.3f, trained with flipped sign %.3f; sampled reward: early %.3f, late %.3f vs flipped %.3f",
		initialEM, finalEM[1], finalEM[-1], earlyReward, lateReward[1], lateReward[-1])
	if !(finalEM[1] > initialEM) {
		t.Errorf("training did not improve greedy EM: %.3f -> %.3f", initialEM, finalEM[1])
	}
	if !(finalEM[-1] < finalEM[1]) {
		t.Errorf("flipped sign: greedy EM %.3f is not below the right sign's %.3f", finalEM[-1], finalEM[1])
	}
	// The sampled reward is the policy's expected EM on training questions:
	// with the flipped sign it falls below where it started.
	if !(lateReward[-1] < earlyReward && lateReward[-1] < lateReward[1]) {
		t.Errorf("flipped sign: late reward %.3f (early %.3f, right sign late %.3f)", lateReward[-1], earlyReward, lateReward[1])
	}
}

// Every loss form, broadcast and teacher runs end to end, and the OPD term
// behaves as its form says.
func TestHindsightAblationsRun(t *testing.T) {
	for _, sets := range [][]string{
		{"hindsight.loss=reverse_kl", "hindsight.broadcast=response", "hindsight.teacher=initial"},
		{"hindsight.loss=clamp", "hindsight.broadcast=trajectory", "hindsight.teacher=self"},
		{"hindsight.loss=none", "hindsight.broadcast=search"},
		{"hindsight.redact_gold=false", "trainer.loss=ppo"},
	} {
		t.Run(strings.Join(sets, ","), func(t *testing.T) {
			r := testRecipe(t, "", append(sets, "train.steps=1", "train.batch_size=6", "eval.datasets.nq=", "eval.datasets.hotpotqa=")...)
			sum, _ := runRecipe(t, r, 1)
			s := sum.Steps[0]
			if s.Failed > 0 && s.Critiques == 0 {
				t.Fatalf("%d failed trajectories, no critique", s.Failed)
			}
			if r.Hindsight.Loss == "none" && s.OPDTokens != 0 {
				t.Errorf("loss none gave %d OPD tokens", s.OPDTokens)
			}
			if r.Hindsight.Loss == "clamp" && s.OPDMean < 0 {
				t.Errorf("clamp gave a negative mean OPD term %v", s.OPDMean)
			}
			if r.Hindsight.Loss == "reverse_kl" && s.OPDTokens == 0 {
				t.Errorf("reverse_kl over whole responses gave no OPD token")
			}
		})
	}
}

// Lockstep (Search-R1's turn-level batching) and async scheduling sample
// the same trajectories, so they send the trainer the same batches.
func TestLockstepAndAsyncSendTheSameBatches(t *testing.T) {
	var digests [2][]string
	for i, sched := range []string{"async", "lockstep"} {
		r := testRecipe(t, "", "rollout.schedule="+sched, "eval.datasets.nq=", "eval.datasets.hotpotqa=")
		sum, _ := runRecipe(t, r, 1)
		digests[i] = stepDigests(sum)
	}
	if strings.Join(digests[0], ",") != strings.Join(digests[1], ",") {
		t.Fatalf("async %v\nlockstep %v", digests[0], digests[1])
	}
}

// With train.max_off_policy_steps = k, step n samples with the weights of
// step n-1-k (never staler), and the datums carry the logprobs of the
// weights that sampled them, for the trainer's importance ratio.
func TestOffPolicyStalenessAndSamplingLogprobs(t *testing.T) {
	const k = 1
	r := testRecipe(t, "", "train.max_off_policy_steps=1", "train.steps=4", "eval.datasets.nq=", "eval.datasets.hotpotqa=",
		"output.trajectories=4")
	ctx := context.Background()
	deps, emb, err := setup.Connect(ctx, r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	sum, err := (&Runner{Recipe: r, Deps: deps}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"sim/base", "sim/base", adapterIn(t, r.Output.Dir, 1), adapterIn(t, r.Output.Dir, 2)}
	for i, s := range sum.Steps {
		if s.SampledWith != want[i] {
			t.Errorf("step %d sampled with %q, want %q", s.Step, s.SampledWith, want[i])
		}
		if s.PolicyLag > k || (s.Step > 1 && s.PolicyLag != k) {
			t.Errorf("step %d: policy lag %d, bound %d", s.Step, s.PolicyLag, k)
		}
	}
	// Step 4's kept trajectories: their logprobs are step 2's weights' scores
	// (what sampled them), not step 3's.
	raw, err := os.ReadFile(filepath.Join(r.Output.Dir, "trajectories", "step-0004.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	model := emb.Sim().Model
	p2, _ := emb.Sim().Policies[0].Params(adapterIn(t, r.Output.Dir, 2))
	p3, _ := emb.Sim().Policies[0].Params(adapterIn(t, r.Output.Dir, 3))
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var tr rollout.Trajectory
		if err := json.Unmarshal([]byte(line), &tr); err != nil {
			t.Fatal(err)
		}
		if tr.Model != adapterIn(t, r.Output.Dir, 2) {
			t.Fatalf("trajectory sampled by %q", tr.Model)
		}
		seq := append(append([]int(nil), tr.PromptIDs...), tr.Tokens...)
		s2, s3 := model.Score(p2, seq), model.Score(p3, seq)
		d := BuildDatum(&tr, Terms{Sign: 1, OPDCoef: 1}, nil)
		lps := d.LossFnInputs["logprobs"].Data.([]float32)
		differs := false
		for j, pol := range tr.Policy {
			if !pol {
				continue
			}
			i := len(tr.PromptIDs) + j
			if diff := s2[i] - tr.Logprobs[j]; diff > 1e-6 || diff < -1e-6 {
				t.Fatalf("token %d: sampling logprob %v, step 2 weights score %v", j, tr.Logprobs[j], s2[i])
			}
			if float64(lps[i-1]) != float64(float32(tr.Logprobs[j])) {
				t.Fatalf("datum logprob %v, sampling %v", lps[i-1], tr.Logprobs[j])
			}
			if diff := s3[i] - s2[i]; diff > 1e-6 || diff < -1e-6 {
				differs = true
			}
			checked++
		}
		if !differs {
			t.Logf("trajectory %s: step 3 weights give the same logprobs", tr.ID)
		}
	}
	if checked == 0 {
		t.Fatal("no policy token checked")
	}
}

// Transient faults on every role are absorbed: with the same seed the run
// sends the trainer the same batches with faults as without, at rollout
// concurrency 1 and 64.
func TestFaultsDoNotChangeBatches(t *testing.T) {
	base := []string{"eval.datasets.nq=", "eval.datasets.hotpotqa=", "http.retries=10", "http.retry_wait_min_ms=1",
		"http.retry_wait_max_ms=20", "http.timeout_seconds=1"}
	var faults []string
	for _, role := range []string{"policy", "judge", "retriever", "trainer"} {
		faults = append(faults, "sim.faults."+role+".rate=0.12",
			"sim.faults."+role+".kinds=500,502,503,429,reset,malformed,slow,hang",
			"sim.faults."+role+".slow_ms=20", "sim.faults."+role+".hang_ms=1500")
	}
	run := func(sets ...string) ([]string, int64) {
		r := testRecipe(t, "", append(append([]string{}, base...), sets...)...)
		ctx := context.Background()
		deps, emb, err := setup.Connect(ctx, r, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer emb.Close()
		sum, err := (&Runner{Recipe: r, Deps: deps}).Run(ctx)
		if err != nil {
			t.Fatalf("%v: %v", sets, err)
		}
		return stepDigests(sum), emb.FaultsInjected()
	}
	clean, n := run()
	if n != 0 {
		t.Fatalf("%d faults without any configured", n)
	}
	for _, conc := range []string{"policy.concurrency=1", "policy.concurrency=64"} {
		got, n := run(append(faults, conc)...)
		if n == 0 {
			t.Fatalf("%s: no fault injected", conc)
		}
		if strings.Join(got, ",") != strings.Join(clean, ",") {
			t.Fatalf("%s, %d faults: digests %v, clean %v", conc, n, got, clean)
		}
		t.Logf("%s: %d faults absorbed, same batches", conc, n)
	}
}

// A second orchestrator on the same run directory is refused, clearly.
func TestSecondOrchestratorRefused(t *testing.T) {
	r := testRecipe(t, "", "eval.datasets.nq=", "eval.datasets.hotpotqa=")
	dir, err := results.Create(r.Output.Dir)
	if err != nil {
		t.Fatal(err)
	}
	held, err := dir.Lock()
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock()
	deps, emb, err := setup.Connect(context.Background(), r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	_, err = (&Runner{Recipe: r, Deps: deps}).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "another orchestrator") {
		t.Fatalf("err %v", err)
	}
}

// API keys come only from the environment variables the recipe names and
// appear in no output, no file of the run directory and no error message.
func TestSecretsNeverWritten(t *testing.T) {
	const key = "sk-hindsearch-test-secret-4242"
	r := testRecipe(t, "", "judge.api_key_env=HS_TEST_JUDGE_KEY", "trainer.api_key_env=HS_TEST_TRAINER_KEY",
		"eval.datasets.nq=", "train.steps=1", "output.trajectories=4")
	environ := []string{"HS_TEST_JUDGE_KEY=" + key, "HS_TEST_TRAINER_KEY=" + key}
	ctx := context.Background()
	deps, emb, err := setup.Connect(ctx, r, environ, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sum, err := (&Runner{Recipe: r, Deps: deps, Out: &out}).Run(ctx)
	emb.Close()
	if err != nil {
		t.Fatal(err)
	}
	if sum.Steps[0].Critiques == 0 {
		t.Fatal("the judge (which requires the key) wrote no critique")
	}
	if strings.Contains(out.String(), key) {
		t.Error("the key is in the output")
	}
	err = filepath.Walk(r.Output.Dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err == nil && bytes.Contains(b, []byte(key)) {
			t.Errorf("the key is in %s", path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// A wrong key: the judge's 401 is reported without either key.
	r2 := testRecipe(t, "", "judge.api_key_env=HS_TEST_JUDGE_KEY", "eval.datasets.nq=", "train.steps=1")
	deps2, emb2, err := setup.Connect(ctx, r2, []string{"HS_TEST_JUDGE_KEY=" + key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb2.Close()
	wrong := "sk-wrong-key-0000000000"
	jc, err := judgeClientWithKey(deps2.Judge.URL(), r2.Judge.Model, wrong)
	if err != nil {
		t.Fatal(err)
	}
	_, err = jc.Chat(ctx, judge.ChatRequest{Messages: []judge.Message{{Role: "user", Content: "Question: q?"}}, MaxTokens: 10})
	if err == nil || !strings.Contains(err.Error(), "401") || strings.Contains(err.Error(), wrong) || strings.Contains(err.Error(), key) {
		t.Fatalf("err %v", err)
	}
}

func judgeClientWithKey(url, model, key string) (*judge.Client, error) {
	return judge.New(transport.DefaultOptions("judge", url), model, key)
}

// A run interrupted in the middle of a step and resumed produces the same
// steps, batches and evaluations as an uninterrupted run.
func TestResumeAfterInterruption(t *testing.T) {
	sets := []string{"train.steps=4", "eval.every=2", "eval.datasets.nq=", "train.max_off_policy_steps=0"}
	for _, k := range []string{"0", "1"} {
		t.Run("off_policy_"+k, func(t *testing.T) {
			ss := append(append([]string{}, sets...), "train.max_off_policy_steps="+k)
			whole := testRecipe(t, "", ss...)
			want, _ := runRecipe(t, whole, 1)

			r := testRecipe(t, "", ss...)
			got, out, _, _ := interruptThenResume(t, r, 2)
			if !strings.Contains(out, "resuming") {
				t.Errorf("output: %s", out)
			}
			digests := func(s *Summary) (ds []string) {
				for _, st := range s.Steps {
					ds = append(ds, fmt.Sprint(st.Step, st.BatchDigest, st.RewardMean))
				}
				return ds
			}
			if strings.Join(digests(got), ";") != strings.Join(digests(want), ";") {
				t.Fatalf("resumed %v\nwhole %v", digests(got), digests(want))
			}
			if evalsText(got.Evals) != evalsText(want.Evals) {
				t.Fatalf("evals: resumed %v\nwhole %v", got.Evals, want.Evals)
			}
			rd := &results.RunDir{Path: r.Output.Dir}
			steps, err := rd.ReadSteps()
			if err != nil || len(steps) != 4 {
				t.Fatalf("steps.jsonl: %v, %d records", err, len(steps))
			}
		})
	}
}

// hungTrainer's forward_backward future never resolves.
type hungTrainer struct{ trainer.Trainer }

func (h hungTrainer) ForwardBackward(ctx context.Context, modelID string, data []trainer.Datum, lossFn string, lossCfg map[string]float64) (*trainer.ForwardBackwardResult, error) {
	<-ctx.Done()
	return nil, fmt.Errorf("trainer forward_backward: %w", ctx.Err())
}

// A hung trainer future fails the step with what to do, instead of hanging.
func TestHungTrainerFutureFailsTheStep(t *testing.T) {
	r := testRecipe(t, "", "trainer.call_timeout_seconds=0.3", "eval.datasets.nq=", "eval.datasets.hotpotqa=")
	deps, emb, err := setup.Connect(context.Background(), r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	deps.Trainer = hungTrainer{deps.Trainer}
	_, err = (&Runner{Recipe: r, Deps: deps}).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "trainer.call_timeout_seconds") || !strings.Contains(err.Error(), "--resume") {
		t.Fatalf("err %v", err)
	}
}

// A policy replica killed mid-run and restarted (losing its adapters) is
// drained, then re-admitted once it serves the weights in use again; no
// trajectory is lost or counted twice: the batches equal a clean run's.
func TestReplicaKilledAndRestarted(t *testing.T) {
	sets := []string{"policy.urls=embedded,embedded", "train.steps=6", "eval.datasets.nq=", "eval.datasets.hotpotqa=",
		"http.retries=2", "http.retry_wait_min_ms=5", "http.retry_wait_max_ms=20"}
	clean, _ := runRecipe(t, testRecipe(t, "", sets...), 1)

	r := testRecipe(t, "", sets...)
	deps, emb, err := setup.Connect(context.Background(), r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	s := emb.Sim()
	restarted := make(chan error, 1)
	var restartErr error
	var rn *Runner
	rn = &Runner{Recipe: r, Deps: deps, afterStep: func(step int) {
		switch step {
		case 1:
			// Down during step 2 (its requests go to replica 1)...
			s.KillPolicy(0)
			go func() {
				time.Sleep(150 * time.Millisecond)
				restarted <- s.RestartPolicy(0)
			}()
		case 2:
			// ...and back, without its adapters, before step 3 starts;
			// and re-admitted (its probe runs every 200 ms) before step 3,
			// so that steps 3 to 6 use it however fast or slow they are.
			if restartErr = <-restarted; restartErr != nil {
				return
			}
			for deadline := time.Now().Add(10 * time.Second); rn.last.rollouts.Replicas.Down(0) && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}}
	got, err := rn.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if restartErr != nil {
		t.Fatal(restartErr)
	}
	for i := range clean.Steps {
		if got.Steps[i].BatchDigest != clean.Steps[i].BatchDigest {
			t.Fatalf("step %d: digest differs from the clean run", i+1)
		}
	}
	// The restarted replica was re-admitted with the adapters in use.
	if s.Policies[0].Stats().Requests == 0 {
		t.Error("the restarted replica served no request")
	}
	if _, ok := s.Policies[0].Params(got.Steps[len(got.Steps)-1].Adapter); !ok {
		t.Error("the restarted replica does not serve the last adapter")
	}
}

// Permanent misconfiguration fails before any work, naming the role, the
// URL and what to do.
func TestPreflightNamesTheProblem(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	for _, tc := range []struct {
		sets []string
		want []string
	}{
		{[]string{"hindsight.teacher=no-such-teacher"}, []string{`does not serve model "no-such-teacher"`, "--served-model-name"}},
		{[]string{"retriever.url=" + dead, "http.retries=0"}, []string{"retriever " + dead, "fix retriever.url"}},
	} {
		r := testRecipe(t, "", append(tc.sets, "eval.datasets.nq=", "eval.datasets.hotpotqa=")...)
		deps, emb, err := setup.Connect(context.Background(), r, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = (&Runner{Recipe: r, Deps: deps}).Run(context.Background())
		emb.Close()
		if err == nil {
			t.Fatalf("%v: no error", tc.sets)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %v lacks %q", tc.sets, err, w)
			}
		}
		if d := time.Since(start); d > doctor.PreflightTimeout {
			t.Errorf("%v: failed after %v", tc.sets, d)
		}
		if _, statErr := os.Stat(filepath.Join(r.Output.Dir, "steps.jsonl")); statErr == nil {
			t.Errorf("%v: a step ran", tc.sets)
		}
	}
}

// scoreCounter is a policy that counts the Score calls in flight and the
// times a Score and a Complete were in flight together.
type scoreCounter struct {
	policy.Policy
	mu          sync.Mutex
	now, most   int
	calls       int
	completing  int
	overlapping int
}

func (s *scoreCounter) Complete(ctx context.Context, req policy.CompletionRequest) (*policy.Completion, error) {
	s.mu.Lock()
	s.completing++
	if s.now > 0 {
		s.overlapping++
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.completing--
		s.mu.Unlock()
	}()
	time.Sleep(time.Millisecond)
	return s.Policy.Complete(ctx, req)
}

func (s *scoreCounter) Score(ctx context.Context, model string, seq []int) ([]float64, error) {
	s.mu.Lock()
	s.now++
	s.calls++
	s.most = max(s.most, s.now)
	if s.completing > 0 {
		s.overlapping++
	}
	s.mu.Unlock()
	time.Sleep(2 * time.Millisecond) // long enough for others to pile up
	defer func() {
		s.mu.Lock()
		s.now--
		s.mu.Unlock()
	}()
	return s.Policy.Score(ctx, model, seq)
}

// hindsight.score_concurrency bounds the teacher and rescore requests in
// flight, while rollouts keep policy.concurrency; hindsight.score_alone
// also keeps every policy turn out of flight while one runs.
func TestScoreConcurrency(t *testing.T) {
	for _, c := range []struct {
		set   string
		most  func(int) bool
		alone bool
	}{
		{"hindsight.score_concurrency=1", func(n int) bool { return n == 1 }, false},
		{"hindsight.score_concurrency=0", func(n int) bool { return n > 1 }, false},
		{"hindsight.score_alone=true", func(n int) bool { return n == 1 }, true},
	} {
		t.Run(c.set, func(t *testing.T) {
			r := testRecipe(t, "", c.set, "policy.concurrency=8", "hindsight.student_logprobs=rescored",
				"train.steps=1", "eval.datasets.nq=", "eval.datasets.hotpotqa=")
			var counters []*scoreCounter
			sum, _ := runRecipeWith(t, r, 1, func(deps *roles.Deps, _ *setup.Embedded) {
				for i, p := range deps.Policies {
					sc := &scoreCounter{Policy: p}
					counters = append(counters, sc)
					deps.Policies[i] = sc
				}
			})
			most, calls, overlapping := 0, 0, 0
			for _, sc := range counters {
				most = max(most, sc.most)
				calls += sc.calls
				overlapping += sc.overlapping
			}
			if sum.Steps[0].Critiques == 0 || calls == 0 || !c.most(most) || (c.alone && overlapping > 0) {
				t.Fatalf("%d critiques, %d score calls, at most %d in flight, %d beside a policy turn",
					sum.Steps[0].Critiques, calls, most, overlapping)
			}
			t.Logf("%d score calls, at most %d in flight, %d beside a policy turn", calls, most, overlapping)
		})
	}
}

// With policy.affinity none nothing is pinned: the step records hold no
// affinity counts.
func TestNoAffinityRecordWithoutPins(t *testing.T) {
	r := testRecipe(t, "", "policy.affinity=none")
	runRecipe(t, r, 1)
	steps, err := (&results.RunDir{Path: r.Output.Dir}).ReadSteps()
	if err != nil || len(steps) == 0 {
		t.Fatalf("steps: %v", err)
	}
	for _, s := range steps {
		if s.Affinity != nil {
			t.Errorf("step %d: affinity %+v with policy.affinity none", s.Step, s.Affinity)
		}
	}
}
