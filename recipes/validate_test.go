package recipes

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// valid returns a valid recipe whose files live in a fixture.
func valid(t *testing.T) Recipe {
	t.Helper()
	f := newFixture(t)
	r := Defaults()
	r.Train.Data = []string{filepath.Join(f.dir, "qa/nq.jsonl")}
	r.Retriever.Corpus = filepath.Join(f.dir, "data/corpus/passages.jsonl")
	r.Eval.Datasets = map[string]string{"hotpotqa": filepath.Join(f.dir, "qa/hotpotqa.jsonl")}
	if err := r.Validate(); err != nil {
		t.Fatalf("valid recipe: %v", err)
	}
	return r
}

func TestValidateNamesEveryProblem(t *testing.T) {
	r := valid(t)
	missing := filepath.Join(t.TempDir(), "missing.jsonl")
	r.Name = "my run"
	r.Policy.URLs = []string{"http://ok:8000", "ftp://x", "localhost:8000"}
	r.Policy.Tokenizer = missing
	r.Policy.Tokenize = "gpu"
	r.Judge.URL = "http://"
	r.Judge.APIKeyEnv = "not a name"
	r.Trainer.Loss = "grpo"
	r.Trainer.ClipLow = 0
	r.Sync.Kind = "nccl"
	r.Train.GroupSize = 1
	r.Train.TopP = 0
	r.Train.TopK = 0
	r.Train.Temperature = -1
	r.Train.Data = append(r.Train.Data, missing)
	r.Hindsight.Loss = "kl"
	r.Hindsight.Broadcast = "all"
	r.Hindsight.Teacher = ""
	r.Hindsight.Coef = -0.5
	r.Hindsight.Clamp = 0
	r.Hindsight.HintTemplate = "Hint:"
	r.Eval.Datasets["nq"] = missing
	r.HTTP.RetryWaitMaxMS = 10
	r.HTTP.Transport = "h2"
	r.Sim.Epsilon = math.NaN()

	err := r.Validate()
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("Validate() = %v, want Problems", err)
	}
	var keys []string
	for _, p := range ps {
		keys = append(keys, p.Key)
	}
	want := []string{
		"name", "policy.urls[1]", "policy.urls[2]", "policy.tokenizer", "policy.tokenize", "judge.url", "judge.api_key_env",
		"trainer.loss", "trainer.clip_low", "sync.kind", "train.group_size",
		"train.data[1]", "train.temperature", "train.top_p", "train.top_k",
		"hindsight.loss", "hindsight.broadcast", "hindsight.teacher", "hindsight.coef",
		"hindsight.clamp", "hindsight.hint_template", "eval.datasets.nq",
		"http.retry_wait_max_ms", "http.transport", "sim.epsilon",
	}
	if !slices.Equal(keys, want) {
		t.Errorf("problem keys =\n%q\nwant\n%q", keys, want)
	}
	for _, s := range []string{
		"\ttrain.group_size: must be at least 2, got 1\n",
		"\ttrainer.loss: must be one of importance_sampling, ppo, got \"grpo\"\n",
		"\thindsight.broadcast: must be one of search, response, trajectory, earliest, got \"all\"\n",
		"\thttp.transport: must be one of net_http, got \"h2\"\n",
		"\ttrain.data[1]: " + missing + ": no such file\n",
		"\teval.datasets.nq: " + missing + ": no such file\n",
	} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error lacks %q:\n%v", s, err)
		}
	}
	if !strings.HasPrefix(err.Error(), "25 problems:\n") {
		t.Errorf("error does not start with the count:\n%v", err)
	}
}

func TestValidateFiles(t *testing.T) {
	r := valid(t)
	r.Train.Data = nil
	r.Retriever.Corpus = filepath.Dir(r.Retriever.Corpus)
	err := r.Validate()
	wantErr(t, err, "train.data: must list at least one file", "retriever.corpus: "+r.Retriever.Corpus+": is a directory")

	// The corpus is needed only by an embedded retriever or judge.
	r = valid(t)
	r.Retriever.Corpus = ""
	wantErr(t, r.Validate(), "retriever.corpus: must name a file")
	r.Retriever.URL = "http://retriever:8000"
	r.Judge.URL = "https://judge.example/v1"
	if err := r.Validate(); err != nil {
		t.Errorf("remote retriever and judge without corpus: %v", err)
	}
}

func TestValidateOneProblemOneLine(t *testing.T) {
	r := valid(t)
	r.Train.GroupSize = 1
	err := r.Validate()
	if err == nil || err.Error() != "train.group_size: must be at least 2, got 1" {
		t.Errorf("Validate() = %v", err)
	}
}

func TestLoadValidates(t *testing.T) {
	f := newFixture(t)
	_, err := Load(f.write(t, minimal+"  group_size: 1\n"), nil, nil)
	if err == nil || err.Error() != "recipe "+f.recipe+": train.group_size: must be at least 2, got 1" {
		t.Errorf("Load = %v", err)
	}
	_, err = Load(f.write(t, "train:\n  data: [qa/none.jsonl]\n"), nil, nil)
	wantErr(t, err, "train.data[0]: "+filepath.Join(f.dir, "qa/none.jsonl")+": no such file")
}

func TestValidateVariants(t *testing.T) {
	f := newFixture(t)
	r := mustLoad(t, f.write(t, minimal+"variants:\n  no-gold: [hindsight.gold_answer=false]\n  by-map: [eval.datasets.nq=qa/nq.jsonl]\n"), nil, nil)
	if len(r.Variants) != 2 || r.Variants["no-gold"][0] != "hindsight.gold_answer=false" {
		t.Fatalf("variants %v", r.Variants)
	}
	_, err := Load(f.write(t, minimal+"variants:\n  bad: [trani.steps=3, nokey, variants.x=a]\n  \"sp ace\": [train.steps=2]\n  empty: []\n"), nil, nil)
	wantErr(t, err, `variants.bad[0]: "trani.steps=3": unknown recipe key "trani.steps"`,
		`variants.bad[1]: "nokey": want key=value`, `variants.bad[2]: "variants.x=a": a variant cannot override variants`,
		"variants.empty: a variant needs at least one key=value override", "variants.sp ace: variant names use")
}

func TestValidateSyncKinds(t *testing.T) {
	// Every kind is accepted; an unknown one lists them.
	for _, kind := range []string{SyncLoRA, SyncSGLangDisk, SyncNone} {
		r := valid(t)
		r.Sync.Kind = kind
		if kind == SyncSGLangDisk {
			r.Trainer.LoRARank = 0 // full weights
			r.Sim.Trainer.Backend = SimBackendFSDP
		}
		if err := r.Validate(); err != nil {
			t.Errorf("sync.kind %s: %v", kind, err)
		}
	}
	r := valid(t)
	r.Sync.Kind = "nccl"
	if err := r.Validate(); err == nil || err.Error() != `sync.kind: must be one of lora, sglang_disk, tinker, none, got "nccl"` {
		t.Errorf("sync.kind nccl: %v", err)
	}

	// lora keeps at least one adapter loaded; the other kinds load none.
	r = valid(t)
	r.Sync.Keep = 0
	if err := r.Validate(); err == nil || err.Error() != "sync.keep: must be at least 1, got 0" {
		t.Errorf("lora with sync.keep 0: %v", err)
	}
	r.Sync.Kind, r.Trainer.LoRARank, r.Sim.Trainer.Backend = SyncSGLangDisk, 0, SimBackendFSDP
	if err := r.Validate(); err != nil {
		t.Errorf("sglang_disk with sync.keep 0: %v", err)
	}
	r.Sync.Keep = -1
	wantErr(t, r.Validate(), "sync.keep: must be at least 0, got -1")

	// sglang_disk replaces the served weights: the initial policy can be
	// the teacher only on reference servers. (An empty sync.dir is fine:
	// the caller puts it under output.dir.)
	r = valid(t)
	r.Sync.Kind, r.Trainer.LoRARank, r.Sim.Trainer.Backend = SyncSGLangDisk, 0, SimBackendFSDP
	r.Sync.Dir = ""
	r.Hindsight.Teacher = TeacherInitial
	r.Reference.URLs = nil
	if err := r.Validate(); err == nil || !strings.HasPrefix(err.Error(), `hindsight.teacher: "initial" needs the initial weights served, which sync.kind sglang_disk overwrites on the policy servers after the first sync: name reference servers serving`) {
		t.Errorf("sglang_disk with teacher initial, no reference servers: %v", err)
	}
	r.Reference.URLs = []string{Embedded}
	if err := r.Validate(); err != nil || !r.TeacherOnReferences() {
		t.Errorf("sglang_disk with teacher initial on reference servers: %v (on references %v)", err, r.TeacherOnReferences())
	}
	r.Reference.URLs = nil
	r.Hindsight.Loss = HindsightLossNone // no teacher scoring
	if err := r.Validate(); err != nil {
		t.Errorf("sglang_disk, teacher initial, loss none: %v", err)
	}
	r.Hindsight.Loss = HindsightLossClamp
	r.Hindsight.Enabled = false // no teacher at all
	if err := r.Validate(); err != nil {
		t.Errorf("sglang_disk, teacher initial, hindsight off: %v", err)
	}
	r.Train.MaxOffPolicySteps = 1
	if err := r.Validate(); err == nil || !strings.HasPrefix(err.Error(), "train.max_off_policy_steps: must be 0 with sync.kind sglang_disk (got 1)") {
		t.Errorf("sglang_disk off-policy: %v", err)
	}
	r.Train.MaxOffPolicySteps = 0
	r.Hindsight.Enabled = true
	r.Sync.Kind, r.Trainer.LoRARank = SyncLoRA, 8
	if err := r.Validate(); err != nil {
		t.Errorf("lora with teacher initial: %v", err)
	}
}

// trainer.lora_rank 0 is full fine-tuning: it goes with a sync kind that
// takes full weights (sglang_disk, or none to evaluate), and a LoRA rank
// with one that loads adapters (lora, or none); each mismatch names both
// keys.
func TestValidateLoRARankMatchesSyncKind(t *testing.T) {
	for _, tc := range []struct {
		rank int
		kind string
		want string // "" valid
	}{
		{0, SyncSGLangDisk, ""},
		{0, SyncNone, ""},
		{32, SyncLoRA, ""},
		{32, SyncNone, ""},
		{0, SyncLoRA, "trainer.lora_rank: 0 (full fine-tuning) needs a full-weight sync.kind (sglang_disk; none for evaluation only), got sync.kind lora"},
		{32, SyncSGLangDisk, "trainer.lora_rank: 32 trains a LoRA adapter, which sync.kind sglang_disk cannot load"},
		{-1, SyncNone, "trainer.lora_rank: must be at least 0, got -1"},
	} {
		r := valid(t)
		r.Trainer.LoRARank, r.Sync.Kind = tc.rank, tc.kind
		r.Sim.Trainer.Backend = SimBackendFSDP // the simulated trainer's JAX refuses rank 0
		err := r.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("rank %d, sync.kind %s: %v", tc.rank, tc.kind, err)
			}
			continue
		}
		wantErr(t, err, tc.want)
	}
}

func TestValidateTraining(t *testing.T) {
	r := valid(t)
	for _, kind := range []string{SyncLoRA, SyncSGLangDisk} {
		r.Sync.Kind = kind
		if err := r.ValidateTraining(); err != nil {
			t.Errorf("sync.kind %s: ValidateTraining() = %v", kind, err)
		}
	}
	r.Sync.Kind = SyncNone
	err := r.ValidateTraining()
	var ps Problems
	if !errors.As(err, &ps) || len(ps) != 1 || ps[0].Key != "sync.kind" {
		t.Fatalf("sync.kind none: ValidateTraining() = %v, want one problem at sync.kind", err)
	}
	wantErr(t, err, `sync.kind: "none" cannot train (train.steps is 100)`, "set sync.kind to lora or sglang_disk, or use orchestrate eval")
	r.Train.Steps = 0
	if err := r.ValidateTraining(); err != nil {
		t.Errorf("sync.kind none, no steps: %v", err)
	}
}

// The sampling keys are checked against vLLM's ranges, and the judge's
// wire keys against their values, each problem naming its key.
func TestValidateSamplingAndJudgeWireKeys(t *testing.T) {
	r := valid(t)
	r.Judge.Temperature = 2.5
	r.Judge.API = "anthropic"
	r.Judge.MaxTokensField = "max_new_tokens"
	r.Train.MinP = 1.5
	r.Train.RepetitionPenalty = 0
	r.Train.PresencePenalty = -3
	r.Train.FrequencyPenalty = math.NaN()
	r.Sim.GenerationConfig = SimGenerationConfig{Temperature: 3, TopP: 0, TopK: -2, MinP: -1, RepetitionPenalty: math.Inf(1), MaxNewTokens: -1}
	var ps Problems
	if err := r.Validate(); !errors.As(err, &ps) {
		t.Fatalf("Validate() = %v, want Problems", err)
	}
	var keys []string
	for _, p := range ps {
		keys = append(keys, p.Key)
	}
	want := []string{"judge.temperature", "judge.api", "judge.max_tokens_field",
		"train.min_p", "train.repetition_penalty", "train.presence_penalty", "train.frequency_penalty",
		"sim.generation_config.temperature", "sim.generation_config.top_p", "sim.generation_config.top_k",
		"sim.generation_config.min_p", "sim.generation_config.repetition_penalty", "sim.generation_config.max_new_tokens"}
	if !slices.Equal(keys, want) {
		t.Errorf("problem keys =\n%q\nwant\n%q", keys, want)
	}
	// The defaults: the vLLM judge API, max_tokens, training sampling off,
	// Qwen2.5 instruct's generation config for the simulator.
	d := Defaults()
	if d.Judge.API != JudgeAPIVLLM || d.Judge.MaxTokensField != JudgeMaxTokens ||
		d.Train.MinP != 0 || d.Train.RepetitionPenalty != 1 || d.Train.PresencePenalty != 0 || d.Train.FrequencyPenalty != 0 ||
		d.Sim.GenerationConfig != (SimGenerationConfig{Temperature: 0.7, TopP: 0.8, TopK: 20, RepetitionPenalty: 1.05}) {
		t.Errorf("defaults: judge %+v, train %+v, sim.generation_config %+v", d.Judge, d.Train, d.Sim.GenerationConfig)
	}
	r = valid(t)
	r.Judge.API, r.Judge.MaxTokensField = JudgeAPIOpenAI, JudgeMaxCompletionTokens
	r.Sim.GenerationConfig.TopK = 0
	if err := r.Validate(); err != nil {
		t.Errorf("openai judge, top_k 0: %v", err)
	}
}

// sim.trainer.archive defaults to jax, takes jax or fsdp from YAML, and
// anything else is a problem naming the key.
func TestValidateSimTrainerArchive(t *testing.T) {
	if got := Defaults().Sim.Trainer.Archive; got != SimArchiveJAX {
		t.Errorf("default sim.trainer.archive %q, want %q", got, SimArchiveJAX)
	}
	for _, layout := range []string{SimArchiveJAX, SimArchiveFSDP} {
		r := valid(t)
		r.Sim.Trainer.Archive = layout
		if err := r.Validate(); err != nil {
			t.Errorf("sim.trainer.archive %s: %v", layout, err)
		}
	}
	for _, bad := range []string{"", "megatron", "JAX"} {
		r := valid(t)
		r.Sim.Trainer.Archive = bad
		if err := r.Validate(); err == nil || err.Error() != `sim.trainer.archive: must be one of jax, fsdp, got "`+bad+`"` {
			t.Errorf("sim.trainer.archive %q: %v", bad, err)
		}
	}
	f := newFixture(t)
	r, err := Load(f.write(t, minimal+"sim:\n  trainer:\n    archive: fsdp\n"), nil, nil)
	if err != nil || r.Sim.Trainer.Archive != SimArchiveFSDP {
		t.Fatalf("sim.trainer.archive from YAML: %v, %+v", err, r)
	}
	if _, err := Load(f.write(t, minimal), []string{"sim.trainer.archive=tar"}, nil); err == nil || !strings.Contains(err.Error(), "sim.trainer.archive") {
		t.Errorf("--set sim.trainer.archive=tar: %v", err)
	}
	if _, err := Load(f.write(t, minimal+"sim:\n  trainer:\n    layout: fsdp\n"), nil, nil); err == nil || !strings.Contains(err.Error(), "sim.trainer.layout") {
		t.Errorf("unknown key sim.trainer.layout: %v", err)
	}
}

// policy.tokenizer is auto, sim or a readable file, and a file only with a
// remote policy server (the embedded simulator has its own vocabulary);
// policy.tokenize is server or local.
func TestValidatePolicyTokenizer(t *testing.T) {
	r := valid(t)
	if r.Policy.Tokenizer != TokenizerAuto || r.Policy.Tokenize != TokenizeServer {
		t.Fatalf("defaults: policy.tokenizer %q, policy.tokenize %q", r.Policy.Tokenizer, r.Policy.Tokenize)
	}
	file := filepath.Join(t.TempDir(), "tokenizer.json")
	writeFile(t, file, "{}")
	cases := []struct {
		urls           []string
		tokenizer, tok string
		want           string // "" valid
	}{
		{[]string{Embedded}, TokenizerAuto, TokenizeLocal, ""},
		{[]string{Embedded}, TokenizerSim, TokenizeServer, ""},
		{[]string{"http://gpu:8000"}, file, TokenizeLocal, ""},
		{[]string{Embedded, "http://gpu:8000"}, file, TokenizeServer, ""},
		{[]string{Embedded}, file, TokenizeServer, "policy.tokenizer: a file (" + file + ") with only embedded policies: the simulator tokenizes with its own vocabulary; set \"auto\""},
		{[]string{"http://gpu:8000"}, file + ".gz", TokenizeServer, "policy.tokenizer: " + file + ".gz: no such file"},
		{[]string{"http://gpu:8000"}, "", TokenizeServer, `policy.tokenizer: must be "auto", "sim", "qwen2.5", "qwen3" or a tokenizer.json file`},
		{[]string{"http://gpu:8000"}, TokenizerAuto, "both", `policy.tokenize: must be one of server, local, got "both"`},
	}
	for _, c := range cases {
		r := valid(t)
		r.Policy.URLs, r.Policy.Tokenizer, r.Policy.Tokenize = c.urls, c.tokenizer, c.tok
		err := r.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v %q %q: %v", c.urls, c.tokenizer, c.tok, err)
		case c.want != "" && (err == nil || err.Error() != c.want):
			t.Errorf("%v %q %q: %v\nwant %s", c.urls, c.tokenizer, c.tok, err, c.want)
		}
	}
}

// policy.server is vllm (the default) or sglang, and sglang needs
// policy.tokenize local: SGLang's /tokenize has no chat template.
func TestValidatePolicyServer(t *testing.T) {
	if r := valid(t); r.Policy.Server != ServerVLLM {
		t.Fatalf("default policy.server %q", r.Policy.Server)
	}
	cases := []struct {
		server, tok string
		want        string // "" valid
	}{
		{ServerVLLM, TokenizeServer, ""},
		{ServerVLLM, TokenizeLocal, ""},
		{ServerSGLang, TokenizeLocal, ""},
		{ServerSGLang, TokenizeServer, `policy.server: "sglang" needs policy.tokenize "local" (SGLang's /tokenize applies no chat template), got policy.tokenize "server"`},
		{ServerTinker, TokenizeServer, "2 problems:\n\t" + `policy.server: "tinker" needs policy.tokenize "local" (a Tinker server takes token ids and has no tokenizer route), got policy.tokenize "server"` + "\n\tsync.kind: must be \"tinker\" (or \"none\" for evaluation only) with policy.server \"tinker\", got \"lora\""},
		{"tgi", TokenizeLocal, `policy.server: must be one of vllm, sglang, tinker, got "tgi"`},
	}
	for _, c := range cases {
		r := valid(t)
		r.Policy.Server, r.Policy.Tokenize = c.server, c.tok
		err := r.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q %q: %v", c.server, c.tok, err)
		case c.want != "" && (err == nil || err.Error() != c.want):
			t.Errorf("%q %q: %v\nwant %s", c.server, c.tok, err, c.want)
		}
	}
}

func TestValidateStudy(t *testing.T) {
	f := newFixture(t)
	r := mustLoad(t, f.write(t, minimal), nil, nil)
	if !slices.Equal(r.Study.Seeds, []int64{1, 2, 3, 4, 5}) || r.Study.Base != StudyBase || len(r.Study.Datasets) != 3 || r.Study.Metric != StudyMetricEM {
		t.Errorf("study defaults %+v", r.Study)
	}
	r = mustLoad(t, f.write(t, minimal+"variants:\n  grpo: [hindsight.enabled=false]\nstudy:\n  seeds: [7, 8]\n  base: grpo\n  metric: reward_auc\n"), []string{"study.datasets=nq"}, nil)
	if !slices.Equal(r.Study.Seeds, []int64{7, 8}) || r.Study.Base != "grpo" || !slices.Equal(r.Study.Datasets, []string{"nq"}) || r.Study.Metric != StudyMetricRewardAUC {
		t.Errorf("study %+v", r.Study)
	}
	_, err := Load(f.write(t, minimal+"study:\n  seeds: [1, 1]\n  base: nope\n  datasets: []\n  metric: f1\n"), nil, nil)
	wantErr(t, err, "study.seeds[1]: seed 1 is listed twice", `study.base: "nope" is neither "base" nor a variant`, "study.datasets: needs at least one dataset",
		`study.metric: must be one of em, reward_auc, got "f1"`)
	_, err = Load(f.write(t, minimal+"study:\n  seedz: [1]\n"), nil, nil)
	wantErr(t, err, "study.seedz")
}

func TestValidateEvalSizes(t *testing.T) {
	r := valid(t)
	r.Eval.PerDataset = 50
	r.Eval.Sizes = map[string]int{"hotpotqa": 0}
	if err := r.Validate(); err != nil {
		t.Fatalf("eval.sizes.hotpotqa=0: %v", err)
	}
	if got := r.Eval.EvalSize("hotpotqa"); got != 0 {
		t.Errorf("EvalSize(hotpotqa) = %d, want its eval.sizes entry 0", got)
	}
	if got := r.Eval.EvalSize("nq"); got != 50 {
		t.Errorf("EvalSize(nq) = %d, want eval.per_dataset 50", got)
	}
	r.Eval.Sizes = map[string]int{"hotpotqa": -1, "musique": 10}
	wantErr(t, r.Validate(), "eval.sizes.hotpotqa: must be at least 0, got -1",
		"eval.sizes.musique: names no eval.datasets entry (have hotpotqa)")
}

// SGLang's SamplingParams.verify takes repetition_penalty in (0, 2] only;
// vLLM any positive value.
func TestValidateSGLangRepetitionPenalty(t *testing.T) {
	for _, c := range []struct {
		server string
		v      float64
		want   string
	}{
		{ServerVLLM, 2.5, ""},
		{ServerSGLang, 2, ""},
		{ServerSGLang, 1.05, ""},
		{ServerSGLang, 2.5, `train.repetition_penalty: must be in (0, 2] with policy.server "sglang" (SGLang refuses other values), got 2.5`},
	} {
		r := valid(t)
		r.Policy.Server, r.Policy.Tokenize = c.server, TokenizeLocal
		r.Train.RepetitionPenalty = c.v
		err := r.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s %g: %v", c.server, c.v, err)
		case c.want != "" && (err == nil || err.Error() != c.want):
			t.Errorf("%s %g: %v\nwant %s", c.server, c.v, err, c.want)
		}
	}
}

// checkpoint.every and checkpoint.keep are at least 1; an embedded trainer
// at rank 0 needs sim.trainer.backend fsdp (JAX refuses rank 0), unless
// only evaluating.
func TestValidateCheckpointAndSimRankZero(t *testing.T) {
	r := valid(t)
	r.Checkpoint.Every, r.Checkpoint.Keep = 0, 0
	wantErr(t, r.Validate(), "checkpoint.every: must be at least 1, got 0", "checkpoint.keep: must be at least 1, got 0")
	r = valid(t)
	r.Checkpoint.Every, r.Checkpoint.Keep = 50, 1
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	r.Sync.Kind, r.Trainer.LoRARank = SyncSGLangDisk, 0
	wantErr(t, r.Validate(), `sim.trainer.backend: "jax" with trainer.lora_rank 0 and trainer.url embedded`, "set sim.trainer.backend: fsdp")
	r.Sim.Trainer.Backend = SimBackendFSDP
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	r.Sim.Trainer.Backend, r.Sync.Kind = SimBackendJAX, SyncNone
	if err := r.Validate(); err != nil {
		t.Errorf("evaluation only: %v", err)
	}
	r.Sync.Kind, r.Trainer.URL = SyncSGLangDisk, "http://127.0.0.1:8000"
	if err := r.Validate(); err != nil {
		t.Errorf("a real trainer: %v", err)
	}
}

// sync.kind tinker samples on the trainer's own server: policy.server
// tinker, policy.urls the trainer's URL alone, and only the sampling
// settings Tinker has.
func TestValidateTinker(t *testing.T) {
	tinker := func(t *testing.T) Recipe {
		r := valid(t)
		r.Policy.Server, r.Policy.Tokenize, r.Sync.Kind = ServerTinker, TokenizeLocal, SyncTinker
		r.Policy.URLs, r.Trainer.URL = []string{Embedded}, Embedded
		return r
	}
	r := tinker(t)
	if err := r.Validate(); err != nil {
		t.Fatalf("embedded tinker: %v", err)
	}
	r.Policy.URLs, r.Trainer.URL = []string{"https://tinker.example"}, "https://tinker.example"
	if err := r.Validate(); err != nil {
		t.Errorf("one Tinker server: %v", err)
	}
	r.Trainer.LoRARank = 0
	r.Sim.Trainer.Backend = SimBackendFSDP
	if err := r.Validate(); err != nil {
		t.Errorf("full weights through tinker: %v", err)
	}
	cases := []struct {
		name string
		edit func(r *Recipe)
		want string
	}{
		{"other policy url", func(r *Recipe) { r.Policy.URLs = []string{"http://127.0.0.1:9"} },
			`policy.urls: must be the trainer's URL alone with sync.kind "tinker" (the Tinker server that trains samples its own weights): set policy.urls: [embedded], got [http://127.0.0.1:9]`},
		{"embedded policy, real trainer", func(r *Recipe) { r.Trainer.URL = "http://127.0.0.1:9" },
			`policy.urls: "embedded" with policy.server "tinker" is the embedded trainer's sampling routes`},
		{"two urls", func(r *Recipe) { r.Policy.URLs = []string{Embedded, Embedded} },
			`policy.urls: must be the trainer's URL alone with sync.kind "tinker"`},
		{"vllm policy", func(r *Recipe) { r.Policy.Server = ServerVLLM },
			`sync.kind: "tinker" needs policy.server "tinker"`},
		{"lora sync", func(r *Recipe) { r.Sync.Kind = SyncLoRA },
			`sync.kind: must be "tinker" (or "none" for evaluation only) with policy.server "tinker", got "lora"`},
		{"min_p", func(r *Recipe) { r.Train.MinP = 0.1 },
			`train.min_p: must be 0 with policy.server "tinker" (Tinker's sampling_params has temperature, top_k and top_p only), got 0.1`},
		{"repetition", func(r *Recipe) { r.Train.RepetitionPenalty = 1.05 },
			`train.repetition_penalty: must be 1 with policy.server "tinker"`},
	}
	for _, c := range cases {
		r := tinker(t)
		c.edit(&r)
		if err := r.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\nwant %s", c.name, err, c.want)
		}
	}
}

// policy.tokenizer and judge.tokenizer qwen2.5 and qwen3 name the built-in
// tokenizers, each for its own family only, and never for the simulator.
func TestValidateBuiltinTokenizers(t *testing.T) {
	r := valid(t)
	r.Policy.URLs, r.Trainer.URL = []string{"https://tinker.example"}, "https://tinker.example"
	r.Policy.Server, r.Policy.Tokenize, r.Sync.Kind = ServerTinker, TokenizeLocal, SyncTinker
	r.Policy.Model, r.Trainer.BaseModel, r.Policy.Tokenizer = "Qwen/Qwen3-4B-Instruct-2507", "Qwen/Qwen3-4B-Instruct-2507", TokenizerQwen3
	r.Judge.URL, r.Judge.API, r.Judge.Model, r.Judge.Tokenizer = "https://tinker.example", JudgeAPITinker, "Qwen/Qwen3-8B", TokenizerQwen3
	if err := r.Validate(); err != nil {
		t.Fatalf("qwen3 for Qwen3 models: %v", err)
	}
	for _, c := range []struct {
		edit func(r *Recipe)
		want string
	}{
		{func(r *Recipe) { r.Policy.Tokenizer = TokenizerQwen25 }, `policy.tokenizer: "qwen2.5" is the Qwen/Qwen2.5-* family's tokenizer, and the model is "Qwen/Qwen3-4B-Instruct-2507"`},
		{func(r *Recipe) { r.Judge.Model = "Qwen/Qwen3.5-9B" }, `judge.tokenizer: "qwen3" is the Qwen/Qwen3-* family's tokenizer, and the model is "Qwen/Qwen3.5-9B"`},
		{func(r *Recipe) { r.Policy.URLs, r.Trainer.URL = []string{Embedded}, Embedded }, `policy.tokenizer: qwen3 with only embedded policies`},
		{func(r *Recipe) { r.Judge.URL = Embedded }, `judge.api: "tinker" needs a Tinker server at judge.url`},
	} {
		r := r
		c.edit(&r)
		if err := r.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v\nwant %s", err, c.want)
		}
	}
}

// A data:<bundle>/<file> path is read under the data directory
// (HINDSEARCH_DATA); a missing one does not make the recipe invalid (it is
// checked on machines without the data) but MissingData names the data
// get command.
func TestDataPaths(t *testing.T) {
	f := newFixture(t)
	data := t.TempDir()
	env := []string{"HINDSEARCH_DATA=" + data, "HOME=" + t.TempDir()}
	sets := []string{"eval.datasets.nq=data:eval-sets/nq.jsonl"}
	path := f.write(t, minimal)
	r0, err := Load(path, sets, env)
	if err != nil {
		t.Fatalf("a missing data: file made the recipe invalid: %v", err)
	}
	err = r0.MissingData()
	want := filepath.Join(data, "eval-sets", "nq.jsonl") + ": no such file: the eval-sets bundle is not on disk: run `orchestrate data get eval-sets`"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("%v\nwant %s", err, want)
	}
	if err := os.MkdirAll(filepath.Join(data, "eval-sets"), 0o755); err != nil {
		t.Fatal(err)
	}
	src, _ := os.ReadFile(filepath.Join(f.dir, "qa", "nq.jsonl"))
	if err := os.WriteFile(filepath.Join(data, "eval-sets", "nq.jsonl"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Load(path, sets, env)
	if err != nil || r.MissingData() != nil {
		t.Fatal(err, r.MissingData())
	}
	if got := r.Eval.Datasets["nq"]; got != filepath.Join(data, "eval-sets", "nq.jsonl") {
		t.Errorf("eval.datasets.nq = %s", got)
	}
}

// eval.subset rand1000 reads the eval-rand1000 bundle's file of each
// dataset (a missing one names the data get command); the named subsets
// cover the seven datasets only, naming the key of another.
func TestNamedSubsetKeys(t *testing.T) {
	f := newFixture(t)
	data := t.TempDir()
	env := []string{"HINDSEARCH_DATA=" + data, "HOME=" + t.TempDir()}
	path := f.write(t, minimal)
	nq := filepath.Join(f.dir, "qa", "nq.jsonl")
	r, err := Load(path, []string{"eval.subset=rand1000", "eval.datasets.nq=" + nq}, env)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(data, "eval-rand1000", "nq.jsonl") + ": no such file: the eval-rand1000 bundle is not on disk: run `orchestrate data get eval-rand1000`"
	if err := r.MissingData(); err == nil || !strings.Contains(err.Error(), want) || r.Eval.SubsetFiles["nq"] != filepath.Join(data, "eval-rand1000", "nq.jsonl") {
		t.Errorf("%v\nwant %s; files %v", err, want, r.Eval.SubsetFiles)
	}
	if r.Eval.Subset != SubsetRand1000 || r.Eval.Describe() != "ASearcher's rand1000 (1,000 of each, Bamboogle's 125)" {
		t.Errorf("subset %q: %s", r.Eval.Subset, r.Eval.Describe())
	}
	for _, s := range []string{SubsetRand1000, SubsetSearchR1Test} {
		_, err = Load(path, []string{"eval.subset=" + s, "eval.datasets.mine=" + nq}, env)
		wantErr(t, err, `eval.datasets.mine: eval.subset `+s+` names the questions of 2wikimultihopqa, bamboogle, hotpotqa, musique, nq, popqa, triviaqa only, and not of "mine"`)
	}
}

// The embedded BM25 index's parameters: Pyserini's by default, k1 at
// least 0 and b in [0, 1].
func TestValidateBM25Params(t *testing.T) {
	r := valid(t)
	if r.Retriever.BM25K1 != 0.9 || r.Retriever.BM25B != 0.4 {
		t.Errorf("defaults %v %v", r.Retriever.BM25K1, r.Retriever.BM25B)
	}
	for _, c := range []struct {
		k1, b float64
		want  string
	}{{-0.1, 0.4, "retriever.bm25_k1: must be a number at least 0, got -0.1"}, {math.NaN(), 0.4, "retriever.bm25_k1"}, {0.9, 1.2, "retriever.bm25_b: must be in [0, 1], got 1.2"}} {
		r := valid(t)
		r.Retriever.BM25K1, r.Retriever.BM25B = c.k1, c.b
		if err := r.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v\nwant %s", err, c.want)
		}
	}
}

// The health keys name each problem by its key path: an unknown cause
// (with its index), a cause listed twice, a penalty cause the policy does
// not commit, a penalty without causes, the alarm's window and drop, the
// retriever's error handling and the simulated agent's rates.
func TestValidateHealthKeys(t *testing.T) {
	r := valid(t)
	r.Train.Filter = []string{"truncation", "timeout", "truncation"}
	r.Rollout.TurnPenalty = -1
	r.Rollout.TurnPenaltyCauses = []string{"retrieval_error"}
	r.Health.Window = 0
	r.Health.Drop = 1.5
	r.Health.Watch = []string{"reward"}
	r.Retriever.OnError = "ignore"
	r.Retriever.MaxErrorRate = 2
	r.Sim.Agent = SimAgent{InvalidRate: 0.5, RepeatRate: 0.4, RambleRate: 0.2, ThinkCollapse: -1, CutStopRate: 1.5}
	err := r.Validate()
	for _, s := range []string{
		"\ttrain.filter[1]: must be one of invalid_action, truncation, retrieval_error, repeated_query, no_answer, got \"timeout\"\n",
		"\ttrain.filter[2]: \"truncation\" is listed twice\n",
		"\trollout.turn_penalty: must be at least 0",
		"\trollout.turn_penalty_causes[0]: must be one of invalid_action, truncation, repeated_query, no_answer, got \"retrieval_error\"\n",
		"\thealth.window: must be at least 1, got 0\n",
		"\thealth.drop: must be in [0, 1] (0: no alarm), got 1.5\n",
		"\thealth.watch[0]: must be one of think_tokens, answer_rate, sampled_entropy, searches_per_trajectory, response_tokens, gold_retrieved_rate, got \"reward\"\n",
		"\tretriever.on_error: must be one of observe, fail, got \"ignore\"\n",
		"\tretriever.max_error_rate: must be in [0, 1] (1: never fail a step), got 2\n",
		"\tsim.agent: invalid_rate + repeat_rate + ramble_rate must be below 1",
		"\tsim.agent.think_collapse: must be at least 0",
		"\tsim.agent.cut_stop_rate: must be in [0, 1] (1: the agent before issue 36), got 1.5",
	} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("error lacks %q:\n%v", s, err)
		}
	}
	ok := valid(t)
	ok.Sim.Agent.CutStopRate = 1 // the agent before issue 36
	if err := ok.Validate(); err != nil {
		t.Errorf("sim.agent.cut_stop_rate 1: %v", err)
	}
	ok.Rollout.TurnPenalty, ok.Rollout.TurnPenaltyCauses = 0.5, nil
	if err := ok.Validate(); err == nil || !strings.Contains(err.Error(), "rollout.turn_penalty_causes: rollout.turn_penalty 0.5 needs at least one cause") {
		t.Errorf("a penalty without causes: %v", err)
	}
}

// hindsight.term_agg: advantage or search-mean, and search-mean needs a
// term to average.
func TestTermAgg(t *testing.T) {
	r := valid(t)
	if r.Hindsight.TermAgg != TermAggAdvantage || r.OPDApart() {
		t.Fatalf("default term_agg %q (apart %v)", r.Hindsight.TermAgg, r.OPDApart())
	}
	r.Hindsight.TermAgg = "mean"
	wantErr(t, r.Validate(), `hindsight.term_agg: must be one of advantage, search-mean, got "mean"`)
	r.Hindsight.TermAgg = TermAggSearchMean
	if err := r.Validate(); err != nil || !r.OPDApart() || !strings.HasSuffix(r.Switches(), " term_agg=search-mean") {
		t.Errorf("search-mean: %v (apart %v, switches %q)", err, r.OPDApart(), r.Switches())
	}
	r.Hindsight.Loss = HindsightLossNone
	wantErr(t, r.Validate(), "hindsight.term_agg: search-mean averages the OPD term, and hindsight.loss none makes none: set hindsight.loss clamp (or reverse_kl), or hindsight.term_agg advantage")
}

// hindsight.hint: judge or siblings; siblings needs a group to draw on and
// a template with its placeholder.
func TestHintSiblings(t *testing.T) {
	r := valid(t)
	if r.Hindsight.Hint != HintJudge {
		t.Fatalf("default hint %q", r.Hindsight.Hint)
	}
	r.Hindsight.Hint = "oracle"
	wantErr(t, r.Validate(), `hindsight.hint: must be one of judge, siblings, got "oracle"`)
	r.Hindsight.Hint = HintSiblings
	if err := r.Validate(); err != nil || !strings.HasSuffix(r.Switches(), " hint=siblings") {
		t.Errorf("siblings: %v (switches %q)", err, r.Switches())
	}
	r.Train.GroupSize = 1
	wantErr(t, r.Validate(), "hindsight.hint: siblings builds each hint from the other samples of the same question, and train.group_size 1 has none: set train.group_size 2 or more, or hindsight.hint judge")
	r.Train.GroupSize = 5
	r.Hindsight.Broadcast = BroadcastEarliest
	wantErr(t, r.Validate(), "hindsight.broadcast: earliest needs the judge to name the first wrong search, and hindsight.hint siblings asks no judge")
	r.Hindsight.Broadcast = BroadcastSearch
	r.Hindsight.SiblingsTemplate = "Others:"
	wantErr(t, r.Validate(), "hindsight.siblings_template: must contain {siblings}")
}
