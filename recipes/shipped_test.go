package recipes

import (
	"maps"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The tests below read the shipped recipes of this directory.

func TestShippedRecipesLoad(t *testing.T) {
	paths, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fixtures, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < 10 || len(fixtures) < 2 {
		t.Fatalf("found %d recipes and %d fixtures", len(paths), len(fixtures))
	}
	for _, p := range append(paths, fixtures...) {
		r, files, err := LoadChain(p, nil, nil)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if files[len(files)-1] != p {
			t.Errorf("%s: chain %q does not end with the file", p, files)
		}
		if want := strings.TrimSuffix(filepath.Base(p), ".yaml"); r.Name != want {
			t.Errorf("%s: name %q, want the file's name %q", p, r.Name, want)
		}
	}
}

// loadShipped loads a shipped recipe with no environment and no sets.
func loadShipped(t *testing.T, path string) *Recipe {
	t.Helper()
	r, err := Load(path, nil, nil)
	if err != nil {
		t.Fatalf("Load(%s): %v", path, err)
	}
	return r
}

func TestPaperRecipe(t *testing.T) {
	r := loadShipped(t, "hindsearch-qwen2.5-3b.yaml")
	port := func(u string) string {
		p, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		return p.Port()
	}
	// The documented ports, one per role; none is the retrieval server's
	// default (8000) but the first policy replica's.
	ports := map[string]string{
		"policy.urls[0]": port(r.Policy.URLs[0]),
		"policy.urls[1]": port(r.Policy.URLs[1]),
		"judge.url":      port(r.Judge.URL),
		"retriever.url":  port(r.Retriever.URL),
		"trainer.url":    port(r.Trainer.URL),
	}
	want := map[string]string{"policy.urls[0]": "8000", "policy.urls[1]": "8001", "judge.url": "8100", "retriever.url": "8200", "trainer.url": "8300"}
	if len(r.Policy.URLs) != 2 || !maps.Equal(ports, want) {
		t.Errorf("ports %v (policy.urls %q), want %v", ports, r.Policy.URLs, want)
	}

	// Search-R1's training settings (docs/protocols.md) and the paper's
	// HindSearch switches.
	checks := []struct {
		key       string
		got, want any
	}{
		{"policy.model", r.Policy.Model, "Qwen/Qwen2.5-3B-Instruct"},
		{"policy.server", r.Policy.Server, ServerSGLang},
		{"policy.tokenize", r.Policy.Tokenize, TokenizeLocal},
		{"trainer.base_model", r.Trainer.BaseModel, "Qwen/Qwen2.5-3B-Instruct"},
		{"train.batch_size", r.Train.BatchSize, 512},
		{"train.group_size", r.Train.GroupSize, 5},
		{"retriever.topk", r.Retriever.TopK, 3},
		{"rollout.max_turns", r.Rollout.MaxTurns, 4},
		{"rollout.max_turn_tokens", r.Rollout.MaxTurnTokens, 500},
		{"rollout.max_obs_tokens", r.Rollout.MaxObsTokens, 500},
		{"rollout.max_context_tokens", r.Rollout.MaxContextTokens, 4096},
		{"train.temperature", r.Train.Temperature, 1.0},
		{"train.top_p", r.Train.TopP, 1.0},
		{"train.top_k", r.Train.TopK, -1},
		{"trainer.learning_rate", r.Trainer.LearningRate, 1e-6},
		{"sync.kind", r.Sync.Kind, SyncSGLangDisk},
		{"trainer.lora_rank", r.Trainer.LoRARank, 0}, // full weights, not a LoRA
		{"hindsight.enabled", r.Hindsight.Enabled, true},
		{"hindsight.gold_answer", r.Hindsight.GoldAnswer, true},
		{"hindsight.loss", r.Hindsight.Loss, HindsightLossClamp},
		{"hindsight.broadcast", r.Hindsight.Broadcast, BroadcastSearch},
		{"hindsight.teacher", r.Hindsight.Teacher, TeacherInitial},
		{"hindsight.coef", r.Hindsight.Coef, 0.01},
		{"hindsight.term_agg", r.Hindsight.TermAgg, TermAggSearchMean},
		{"judge.model", r.Judge.Model, "Qwen/Qwen2.5-7B-Instruct"},
		{"judge.api_key_env", r.Judge.APIKeyEnv, "JUDGE_API_KEY"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.key, c.got, c.want)
		}
	}
	if err := r.ValidateTraining(); err != nil {
		t.Errorf("the paper recipe cannot train: %v", err)
	}
	if r.Trainer.CheckpointsDir == "" {
		t.Error("trainer.checkpoints_dir is empty: a remote trainer needs it")
	}
	names := slices.Sorted(maps.Keys(r.Eval.Datasets))
	if want := []string{"2wikimultihopqa", "bamboogle", "hotpotqa", "musique", "nq", "popqa", "triviaqa"}; !slices.Equal(names, want) {
		t.Errorf("eval.datasets %q, want the seven benchmarks %q", names, want)
	}
	if len(r.Variants) != 0 {
		t.Errorf("variants %v: the ablations are files, and variants would be inherited by each", r.Variants)
	}
}

func TestPaperAblationsChangeOnlyTheirKeys(t *testing.T) {
	const base = "hindsearch-qwen2.5-3b.yaml"
	cases := map[string]struct {
		chain int           // files layered
		edit  func(*Recipe) // what the file changes in the base's recipe
	}{
		"hindsearch-qwen2.5-3b-nogold.yaml":      {2, func(r *Recipe) { r.Hindsight.GoldAnswer = false }},
		"hindsearch-qwen2.5-3b-nohindsight.yaml": {2, func(r *Recipe) { r.Hindsight.Enabled = false }},
		"hindsearch-qwen2.5-3b-searchagent-zero.yaml": {2, func(r *Recipe) {
			r.Train.Filter = []string{AbnormalTruncation}
			r.Rollout.TurnPenalty = 1
			r.Rollout.TurnPenaltyCauses = []string{AbnormalInvalidAction, AbnormalRepeatedQuery}
		}},
		"hindsearch-qwen2.5-3b-reverse-kl.yaml": {2, func(r *Recipe) { r.Hindsight.Loss = HindsightLossReverseKL }},
		"hindsearch-qwen2.5-3b-loss-none.yaml": {2, func(r *Recipe) {
			r.Hindsight.Loss, r.Hindsight.TermAgg = HindsightLossNone, TermAggAdvantage
		}},
		"hindsearch-qwen2.5-3b-broadcast-response.yaml":   {2, func(r *Recipe) { r.Hindsight.Broadcast = BroadcastResponse }},
		"hindsearch-qwen2.5-3b-broadcast-trajectory.yaml": {2, func(r *Recipe) { r.Hindsight.Broadcast = BroadcastTrajectory }},
		"hindsearch-qwen2.5-3b-lora.yaml": {2, func(r *Recipe) {
			r.Sync.Kind, r.Sync.Keep = SyncLoRA, 2
			r.Policy.Server, r.Policy.Tokenize = ServerVLLM, TokenizeServer
			r.Trainer.LoRARank, r.Trainer.LearningRate = 32, 1e-5
			r.Reference.URLs = []string{} // vLLM keeps serving the base model
		}},
		"hindsearch-qwen2.5-3b-teacher-self.yaml":       {2, func(r *Recipe) { r.Hindsight.Teacher = TeacherSelf }},
		"hindsearch-qwen2.5-3b-siblings.yaml":           {2, func(r *Recipe) { r.Hindsight.Hint = HintSiblings }},
		"hindsearch-qwen2.5-3b-broadcast-earliest.yaml": {2, func(r *Recipe) { r.Hindsight.Broadcast = BroadcastEarliest }},
	}
	// Every ablation file shipped has a case here.
	shipped, err := filepath.Glob("hindsearch-qwen2.5-3b-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(shipped) != len(cases) {
		t.Errorf("shipped ablations %q, want exactly the %d tested here", shipped, len(cases))
	}
	for _, file := range shipped {
		c, ok := cases[file]
		if !ok {
			t.Errorf("%s: no case in this test", file)
			continue
		}
		got, files, err := LoadChain(file, nil, nil)
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		if len(files) != c.chain || files[0] != base {
			t.Errorf("%s: chain %q, want %d files from %s", file, files, c.chain, base)
		}
		want := loadShipped(t, base)
		c.edit(want)
		want.Name = strings.TrimSuffix(file, ".yaml")
		want.Output.Dir = filepath.Join(filepath.Dir(want.Output.Dir), want.Name)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: resolves to\n%+v\nwant the base with only its changes\n%+v", file, *got, *want)
		}
		if err := got.ValidateTraining(); err != nil {
			t.Errorf("%s: %v", file, err)
		}
	}
}

func TestSimFixtures(t *testing.T) {
	// A child of sim.yaml in another directory: sim.yaml's paths still
	// point into recipes/data.
	got := loadShipped(t, "testdata/sim-nogold.yaml")
	want := loadShipped(t, "sim.yaml")
	want.Name, want.Train.Steps, want.Hindsight.GoldAnswer = "sim-nogold", 2, false
	want.Output.Dir = filepath.Join(filepath.Dir(want.Output.Dir), "sim-nogold")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("testdata/sim-nogold.yaml =\n%+v\nwant\n%+v", *got, *want)
	}
	if abs, _ := filepath.Abs("data/qa/nq.jsonl"); got.Train.Data[0] != abs {
		t.Errorf("train.data[0] = %q, want %q (relative to sim.yaml)", got.Train.Data[0], abs)
	}

	// Variants are inherited; the child adds one and redefines one.
	got = loadShipped(t, "testdata/sim-ablate-more.yaml")
	want = loadShipped(t, "sim-ablate.yaml")
	want.Name = "sim-ablate-more"
	want.Output.Dir = filepath.Join(filepath.Dir(want.Output.Dir), "sim-ablate-more")
	want.Variants["coef-half"] = []string{"hindsight.coef=0.5"}
	want.Variants["no-gold"] = []string{"hindsight.gold_answer=false", "hindsight.redact_gold=false"}
	if len(want.Variants) != 11 {
		t.Fatalf("sim-ablate.yaml has %d variants, want 10 (this test's premise)", len(want.Variants)-1)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("testdata/sim-ablate-more.yaml variants =\n%v\nwant\n%v", got.Variants, want.Variants)
	}
}

// sim-study.yaml is sim.yaml at the issue-15 setting: plain GRPO as the
// study base and three hindsight variants, held-out multi-hop evaluation.
func TestShippedSimStudy(t *testing.T) {
	r := loadShipped(t, "sim-study.yaml")
	if r.Train.Steps != 24 || r.Train.BatchSize != 32 || r.Train.GroupSize != 5 || r.Eval.Every != 8 || r.Eval.PerDataset != 100 {
		t.Errorf("train %+v eval every %d per_dataset %d", r.Train, r.Eval.Every, r.Eval.PerDataset)
	}
	if got := slices.Sorted(maps.Keys(r.Eval.Datasets)); !slices.Equal(got, []string{"2wikimultihopqa", "hotpotqa", "musique"}) {
		t.Errorf("eval.datasets %v", got)
	}
	// Trained on the two multi-hop sets the shipped corpus has passages
	// for, with the held-out questions left out of training.
	var data []string
	for _, d := range r.Train.Data {
		data = append(data, filepath.Base(d))
	}
	if !slices.Equal(data, []string{"hotpotqa.jsonl", "2wikimultihopqa.jsonl"}) || !r.Train.ExcludeEval {
		t.Errorf("train.data %v exclude_eval %v, want HotpotQA and 2Wiki without the held-out questions", data, r.Train.ExcludeEval)
	}
	if r.Study.Base != "grpo" || !slices.Equal(r.Study.Seeds, []int64{1, 2, 3, 4, 5}) {
		t.Errorf("study %+v", r.Study)
	}
	want := map[string][]string{"grpo": {"hindsight.enabled=false"}, "hindsight": {"hindsight.enabled=true"},
		"no-gold": {"hindsight.gold_answer=false"}, "coef0": {"hindsight.coef=0"}, "siblings": {"hindsight.hint=siblings"},
		"hindsight-self-adv": {"hindsight.teacher=self", "hindsight.coef=1", "hindsight.term_agg=advantage"},
		"earliest":           {"hindsight.broadcast=earliest"}}
	if !maps.EqualFunc(r.Variants, want, slices.Equal) {
		t.Errorf("variants %v, want %v", r.Variants, want)
	}
	if !r.Hindsight.Enabled || !r.Hindsight.GoldAnswer || !r.Hindsight.RedactGold {
		t.Errorf("hindsight %+v: the recipe itself is hindsight with gold critiques", r.Hindsight)
	}
}

// The paper recipe trains as Search-R1's verl GRPO (issue 33): the keys
// `orchestrate recipe check` shows, each at Search-R1's value.
func TestPaperRecipeIsSearchR1sOptimisation(t *testing.T) {
	r := loadShipped(t, "hindsearch-qwen2.5-3b.yaml")
	tr := r.Trainer
	if tr.MiniBatchSize != 256 || tr.LossAgg != LossAggTokenMean || r.Hindsight.StudentLogprobs != StudentLogprobsRescored ||
		tr.LRWarmupSteps != 286 || tr.AdvantageStd != StdUnbiased || tr.KLCoef != 0.001 || tr.EntropyCoef != 0.001 ||
		!r.Rollout.FinalAnswerRound || r.Rollout.MaxTurns != 4 || r.Train.Steps != 300 || len(r.Reference.URLs) != 1 {
		t.Errorf("paper recipe: trainer %+v, student_logprobs %s, rollout %+v, steps %d, reference %v",
			tr, r.Hindsight.StudentLogprobs, r.Rollout, r.Train.Steps, r.Reference.URLs)
	}
}

// The KL term and the initial-policy teacher need the initial weights,
// which sglang_disk overwrites on the policy servers: without reference
// servers the recipe is refused, naming the key.
func TestKLWithFullWeightSyncNeedsReference(t *testing.T) {
	r := loadShipped(t, "hindsearch-qwen2.5-3b.yaml")
	r.Reference.URLs = nil
	err := r.Validate()
	if err == nil || !strings.Contains(err.Error(), "reference.urls") || !strings.Contains(err.Error(), "sglang_disk") {
		t.Fatalf("err %v", err)
	}
	// Nor the paper's teacher, the initial policy.
	r.Trainer.KLCoef = 0
	if err := r.Validate(); err == nil || !strings.Contains(err.Error(), "hindsight.teacher") || !strings.Contains(err.Error(), "reference.urls") {
		t.Fatalf("without the KL term, teacher initial: %v", err)
	}
	r.Hindsight.Teacher = TeacherSelf
	if err := r.Validate(); err != nil {
		t.Fatalf("without the KL term, teacher self: %v", err)
	}
}
