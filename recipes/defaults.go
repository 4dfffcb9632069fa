package recipes

// Allowed values of the enumerated keys.
const (
	// TrainerLossImportanceSampling is trainer.loss for the Tinker
	// importance-sampling policy-gradient loss (the default).
	TrainerLossImportanceSampling = "importance_sampling"
	// TrainerLossPPO is trainer.loss for the clipped PPO loss
	// (trainer.clip_low, trainer.clip_high).
	TrainerLossPPO = "ppo"

	// SyncLoRA is sync.kind for saving a LoRA adapter and hot-loading it
	// into every policy replica (vLLM's /v1/load_lora_adapter; the
	// default).
	SyncLoRA = "lora"
	// SyncSGLangDisk is sync.kind for saving full weights and loading them
	// on every policy replica with SGLang's /update_weights_from_disk (the
	// served model name stays the same, so the initial weights are no
	// longer served after the first sync).
	SyncSGLangDisk = "sglang_disk"
	// SyncTinker is sync.kind for a policy that samples on the Tinker
	// server that trains (policy.server tinker): after each step an
	// ephemeral save_weights_for_sampler makes a sampling session over
	// the new weights; nothing is archived or copied.
	SyncTinker = "tinker"
	// SyncNone is sync.kind for evaluation only: no weights reach the
	// policy servers, so no training (ValidateTraining refuses it).
	SyncNone = "none"

	// HindsightLossClamp is hindsight.loss for the clamped one-sided term
	// clamp(lp_teacher - lp_student, 0, hindsight.clamp) (the default).
	HindsightLossClamp = "clamp"
	// HindsightLossReverseKL is hindsight.loss for the two-sided reverse-KL
	// term.
	HindsightLossReverseKL = "reverse_kl"
	// HindsightLossNone is hindsight.loss for no on-policy-distillation term
	// (critiques are still written and counted).
	HindsightLossNone = "none"

	// LossAggTokenMean is trainer.loss_agg for the mean over a
	// mini-batch's policy tokens (verl's token-mean).
	LossAggTokenMean = "token-mean"
	// LossAggSeqMeanTokenMean is trainer.loss_agg for the mean over a
	// mini-batch's trajectories of each one's token mean.
	LossAggSeqMeanTokenMean = "seq-mean-token-mean"
	// LossAggSeqMeanTokenSum is trainer.loss_agg for the mean over a
	// mini-batch's trajectories of each one's token sum.
	LossAggSeqMeanTokenSum = "seq-mean-token-sum"
	// LossAggSum is trainer.loss_agg for the plain sum over a
	// mini-batch's policy tokens.
	LossAggSum = "sum"
	// BackendAuto is trainer.backend for telling the trainer's own loss
	// aggregation at the start of a run.
	BackendAuto = "auto"
	// BackendSkyRLJAX is trainer.backend for SkyRL's JAX backend: each
	// datum's token mean, averaged over the datums of an optim_step.
	BackendSkyRLJAX = "skyrl-jax"
	// BackendSkyRLFSDP is trainer.backend for SkyRL's FSDP (and Megatron)
	// backend: one token sum over the datums of an optim_step.
	BackendSkyRLFSDP = "skyrl-fsdp"
	// BackendHosted is trainer.backend for the hosted Tinker service: its
	// losses are token sums, as FSDP's.
	BackendHosted = "hosted"
	// StdUnbiased is trainer.advantage_std for the n-1 standard deviation.
	StdUnbiased = "unbiased"
	// StdPopulation is trainer.advantage_std for the n standard deviation.
	StdPopulation = "population"
	// StudentLogprobsSampled is hindsight.student_logprobs for the
	// student's logprobs in the OPD term being the sampling (decode-time)
	// ones the rollout returned (the default).
	StudentLogprobsSampled = "sampled"
	// StudentLogprobsRescored is hindsight.student_logprobs for scoring the
	// student's tokens again, in its own context without the hint, by the
	// same prefill route (prompt logprobs) that scores the teacher: the
	// clamp then compares two prefill logprobs, and the numerical
	// difference between prefill and decode no longer biases the term.
	// It costs one extra prefill per failed trajectory.
	StudentLogprobsRescored = "rescored"

	// BroadcastSearch is hindsight.broadcast for applying the term to the
	// search tokens only (the default).
	BroadcastSearch = "search"
	// BroadcastResponse is hindsight.broadcast for applying it to every
	// policy token of the response.
	BroadcastResponse = "response"
	// BroadcastTrajectory is hindsight.broadcast for one trajectory-level
	// scalar spread over the policy tokens.
	BroadcastTrajectory = "trajectory"
	// BroadcastEarliest is hindsight.broadcast for the term on the search
	// tokens of one turn: the first search the judge names as wrong (its
	// critique's first line "Step N").
	BroadcastEarliest = "earliest"

	// TermAggAdvantage is hindsight.term_agg for the OPD term added to
	// each token's advantage (coef times the term), aggregated with the
	// policy loss by trainer.loss_agg (the default).
	TermAggAdvantage = "advantage"
	// TermAggSearchMean is hindsight.term_agg for the OPD term as a loss of
	// its own: its mean over the mini-batch's term tokens (the search
	// tokens of failed trajectories under hindsight.broadcast search),
	// coef times it added to the policy loss (L_PPO + coef * L_OPD).
	TermAggSearchMean = "search-mean"

	// TeacherSelf is hindsight.teacher for the current policy (the default).
	TeacherSelf = "self"
	// TeacherInitial is hindsight.teacher for the initial policy. Any other
	// non-empty value names a model served by the policy servers.
	TeacherInitial = "initial"

	// ScheduleAsync is rollout.schedule for independent trajectories.
	ScheduleAsync = "async"
	// ScheduleLockstep is rollout.schedule for Search-R1's turn-level
	// batching.
	ScheduleLockstep = "lockstep"

	// SimArchiveJAX is sim.trainer.archive for SkyRL's JAX backend's
	// archives: a gzip tar (level 0) whose first entry is the root
	// directory "/", the files at the top (the default).
	SimArchiveJAX = "jax"
	// SimArchiveFSDP is sim.trainer.archive for SkyRL's FSDP and Megatron
	// backends' archives: an uncompressed tar, still named .tar.gz, of
	// entries under "./".
	SimArchiveFSDP = "fsdp"

	// SimBackendJAX is sim.trainer.backend for SkyRL's JAX backend: the
	// loss of each datum is its mean over its weighted tokens, several
	// LoRA models share a server, full weights (rank 0) are refused (the
	// default).
	SimBackendJAX = "jax"
	// SimBackendFSDP is sim.trainer.backend for SkyRL's FSDP (and
	// Megatron) backend, the one both paper recipes run on:
	// the loss is a token sum over the whole step, the gradient norm is
	// clipped at 1.0, and one server holds one policy model at a time.
	SimBackendFSDP = "fsdp"
)

// Allowed values of judge.api and judge.max_tokens_field.
const (
	// JudgeAPIVLLM is judge.api for vLLM's OpenAI-compatible server (the
	// default): every sampling field is sent.
	JudgeAPIVLLM = "vllm"
	// JudgeAPIOpenAI is judge.api for OpenAI's hosted API: only the
	// sampling fields it defines are sent.
	JudgeAPIOpenAI = "openai"
	// JudgeAPITinker is judge.api for a Tinker API server (asample on
	// the judge model, the hosted service or SkyRL): the chat template
	// is applied and the messages tokenized in this process, with
	// judge.tokenizer.
	JudgeAPITinker = "tinker"
	// JudgeMaxTokens is judge.max_tokens_field for "max_tokens" (the
	// default).
	JudgeMaxTokens = "max_tokens"
	// JudgeMaxCompletionTokens is judge.max_tokens_field for
	// "max_completion_tokens".
	JudgeMaxCompletionTokens = "max_completion_tokens"
)

// Placeholders substituted in recipe strings.
const (
	// NamePlaceholder in output.dir is replaced by the recipe name at load.
	NamePlaceholder = "{name}"
	// SiblingsPlaceholder in hindsight.siblings_template is replaced by the
	// list of the other trajectories of the group (hindsight.hint
	// siblings).
	SiblingsPlaceholder = "{siblings}"
	// HintJudge is hindsight.hint for the judge's critique (the default).
	HintJudge = "judge"
	// HintSiblings is hindsight.hint for a hint without a judge: the other
	// trajectories of the group, each as its search queries in order and
	// Correct or Incorrect (SD-Search's hindsight block).
	HintSiblings = "siblings"

	// CritiquePlaceholder in hindsight.hint_template is replaced by the
	// critique when the teacher context is built.
	CritiquePlaceholder = "{critique}"
)

// Defaults returns a new Recipe holding the default of every key. The
// defaults follow Search-R1's training settings with the embedded
// implementation of every role, so that a recipe naming only train.data runs
// on a laptop. Empty strings mean "the caller decides":
//
//   - judge.api_key_env, trainer.api_key_env: no Authorization header;
//   - retriever.index_dir: os.UserCacheDir()/hindsearch/bm25;
//   - trainer.checkpoints_dir, sync.dir: under output.dir;
//   - hindsight.prompt: the program's default judge prompt.
//
// Paths are relative: Load resolves them against the recipe file's
// directory. train.data is empty and must be set; eval.datasets is empty (no
// evaluation). Each call returns fresh slices and maps.
func Defaults() Recipe {
	return Recipe{
		Name: "hindsearch",
		Seed: 1,
		Policy: Policy{
			URLs:        []string{Embedded},
			Model:       "Qwen/Qwen2.5-3B-Instruct",
			Concurrency: 32,
			Tokenizer:   TokenizerAuto,
			Tokenize:    TokenizeServer,
			Server:      ServerVLLM,
			// What SkyRL answers a client that does not ask for protobuf.
			TinkerResults: TinkerResultsJSON,
			// Sticky least-loaded, as verl, SkyRL and AReaL balance. The
			// margin is not tuned here: verl found a per-session margin of
			// 2 to help where a global gate hurt (verl PR 7435); 4 leaves
			// room at the dozens of requests a replica holds in flight.
			Affinity:       AffinityTrajectory,
			AffinityMargin: 4,
		},
		Judge: Judge{
			URL:            Embedded,
			Model:          "Qwen/Qwen2.5-7B-Instruct",
			APIKeyEnv:      "",
			MaxTokens:      256,
			Temperature:    0,
			Concurrency:    16,
			API:            JudgeAPIVLLM,
			Tokenizer:      TokenizerAuto,
			MaxTokensField: JudgeMaxTokens,
		},
		Retriever: Retriever{
			URL:      Embedded,
			Corpus:   "data/corpus/passages.jsonl",
			TopK:     3,
			IndexDir: "",
			// A short window: searches of one step's trajectories that
			// arrive together share a call.
			BatchWindowMS: 2,
			MaxBatch:      64,
			Cache:         true,
			// Pyserini's defaults (bm25.PyseriniParams).
			BM25K1: 0.9,
			BM25B:  0.4,
			// A failed search is the trajectory's observation; a step
			// whose searches fail more than a quarter of the time stops
			// the run.
			OnError:      OnErrorObserve,
			MaxErrorRate: 0.25,
		},
		Trainer: Trainer{
			URL:            Embedded,
			APIKeyEnv:      "",
			BaseModel:      "Qwen/Qwen2.5-3B-Instruct",
			LoRARank:       32,
			LearningRate:   1e-6,
			Loss:           TrainerLossImportanceSampling,
			ClipLow:        0.8,
			ClipHigh:       1.2,
			Beta1:          0.9,
			Beta2:          0.95,
			Eps:            1e-8,
			WeightDecay:    0,
			CheckpointsDir: "",
			ChunkSize:      32,
			// SkyRL holds a poll up to 300 s; a whole call may queue behind
			// other users' work.
			CallTimeoutSeconds: 1800,
			MiniBatchSize:      0,
			LRWarmupSteps:      0,
			LossAgg:            LossAggTokenMean,
			Backend:            BackendAuto,
			AdvantageStd:       StdUnbiased,
			KLCoef:             0,
			EntropyCoef:        0,
		},
		Reference: Reference{URLs: []string{}, Server: ServerVLLM},
		Sync: Sync{
			Kind: SyncLoRA,
			Dir:  "",
			Keep: 2,
		},
		Checkpoint: Checkpoint{Every: 1, Keep: 2},
		Train: Train{
			Steps:       100,
			BatchSize:   512,
			GroupSize:   5,
			Data:        []string{},
			Temperature: 1.0,
			TopP:        1.0,
			TopK:        -1,
			// Off: the sampled distribution is the model's own, the one
			// whose raw logprobs vLLM reports.
			MinP:              0,
			RepetitionPenalty: 1,
			PresencePenalty:   0,
			FrequencyPenalty:  0,
			ExcludeEval:       true,
			Filter:            []string{},
		},
		Rollout: Rollout{
			MaxTurns:          4,
			FinalAnswerRound:  true,
			MaxTurnTokens:     500,
			MaxObsTokens:      500,
			MaxContextTokens:  4096,
			Schedule:          "async",
			TurnPenalty:       0,
			TurnPenaltyCauses: []string{AbnormalInvalidAction, AbnormalRepeatedQuery},
		},
		Tracking: Tracking{WandB: TrackWandB{Mode: WandBOffline}, FlushSeconds: 30},
		Health:   Health{Window: 5, Drop: 0.5, Watch: []string{"think_tokens", "answer_rate", "sampled_entropy"}},
		Hindsight: Hindsight{
			Enabled:          true,
			GoldAnswer:       true,
			Loss:             HindsightLossClamp,
			Broadcast:        BroadcastSearch,
			Teacher:          TeacherSelf,
			Coef:             1.0,
			TermAgg:          TermAggAdvantage,
			Clamp:            1.0,
			StudentLogprobs:  StudentLogprobsSampled,
			RedactGold:       true,
			MaxCritiqueChars: 1200,
			Prompt:           "",
			HintTemplate:     "Hint: " + CritiquePlaceholder + "\n",
			Hint:             HintJudge,
			SiblingsTemplate: "Other attempts at this question, their searches in order:\n" + SiblingsPlaceholder,
		},
		Eval: Eval{
			Every:      10,
			Datasets:   map[string]string{},
			PerDataset: 0,
			Subset:     SubsetFirst,
			SubsetSeed: 1,
		},
		Output: Output{
			Dir:             "runs/" + NamePlaceholder,
			Trajectories:    16,
			TrajectorySteps: 20,
		},
		Study: Study{
			Seeds:    []int64{1, 2, 3, 4, 5},
			Base:     StudyBase,
			Datasets: []string{"hotpotqa", "2wikimultihopqa", "musique"},
			Metric:   StudyMetricEM,
		},
		HTTP: HTTP{
			TimeoutSeconds: 60,
			Retries:        4,
			RetryWaitMinMS: 50,
			RetryWaitMaxMS: 2000,
			PoolSize:       64,
			Transport:      TransportNetHTTP,
		},
		Sim: Sim{
			Epsilon: 1e-6,
			// Qwen2.5 instruct's generation_config.json.
			GenerationConfig: SimGenerationConfig{Temperature: 0.7, TopP: 0.8, TopK: 20, MinP: 0, RepetitionPenalty: 1.05, MaxNewTokens: 0},
			ThinkSigma:       1.0,
			PrefixCaching:    true,
			RetrieverStyle:   RetrieverStyleDense,
			Trainer:          SimTrainer{Archive: SimArchiveJAX, Backend: SimBackendJAX, DeleteRoute: true},
			Faults: SimFaults{
				Policy:    FaultSpec{Kinds: []string{}, HangMS: 5000, SlowMS: 200},
				Judge:     FaultSpec{Kinds: []string{}, HangMS: 5000, SlowMS: 200},
				Retriever: FaultSpec{Kinds: []string{}, HangMS: 5000, SlowMS: 200},
				Trainer:   FaultSpec{Kinds: []string{}, HangMS: 5000, SlowMS: 200},
			},
		},
	}
}
