// Package recipes defines the recipe schema: every setting of a run, its
// defaults, how a recipe is loaded (file, then ORCH_ environment variables,
// then --set overrides) and how it is validated.
package recipes

// Embedded is the URL value that starts a role's embedded implementation on
// a loopback port.
const Embedded = "embedded"

// Recipe is one resolved recipe. Field names map to YAML keys through the
// mapstructure tags; paths inside it are resolved relative to the recipe
// file's directory once loaded.
type Recipe struct {
	Name      string    `mapstructure:"name" yaml:"name"`
	Seed      int64     `mapstructure:"seed" yaml:"seed"`
	Policy    Policy    `mapstructure:"policy" yaml:"policy"`
	Judge     Judge     `mapstructure:"judge" yaml:"judge"`
	Retriever Retriever `mapstructure:"retriever" yaml:"retriever"`
	Trainer   Trainer   `mapstructure:"trainer" yaml:"trainer"`
	Sync      Sync      `mapstructure:"sync" yaml:"sync"`
	Train     Train     `mapstructure:"train" yaml:"train"`
	Rollout   Rollout   `mapstructure:"rollout" yaml:"rollout"`
	Hindsight Hindsight `mapstructure:"hindsight" yaml:"hindsight"`
	Eval      Eval      `mapstructure:"eval" yaml:"eval"`
	Output    Output    `mapstructure:"output" yaml:"output"`
	HTTP      HTTP      `mapstructure:"http" yaml:"http"`
	Sim       Sim       `mapstructure:"sim" yaml:"sim"`
}

// Policy configures the policy servers (vLLM replicas).
type Policy struct {
	// URLs are the replicas' base URLs, or ["embedded"].
	URLs []string `mapstructure:"urls" yaml:"urls"`
	// Model is the base model name the servers serve.
	Model string `mapstructure:"model" yaml:"model"`
	// Concurrency is the number of trajectories in flight per replica.
	Concurrency int `mapstructure:"concurrency" yaml:"concurrency"`
}

// Judge configures the judge endpoint.
type Judge struct {
	URL   string `mapstructure:"url" yaml:"url"`
	Model string `mapstructure:"model" yaml:"model"`
	// APIKeyEnv names the environment variable holding the bearer key
	// (empty: no Authorization header).
	APIKeyEnv   string  `mapstructure:"api_key_env" yaml:"api_key_env"`
	MaxTokens   int     `mapstructure:"max_tokens" yaml:"max_tokens"`
	Temperature float64 `mapstructure:"temperature" yaml:"temperature"`
	Concurrency int     `mapstructure:"concurrency" yaml:"concurrency"`
}

// Retriever configures the retriever.
type Retriever struct {
	URL string `mapstructure:"url" yaml:"url"`
	// Corpus is the wiki-18-format JSONL corpus the embedded BM25 index and
	// the simulated judge read.
	Corpus string `mapstructure:"corpus" yaml:"corpus"`
	TopK   int    `mapstructure:"topk" yaml:"topk"`
	// IndexDir caches built BM25 indexes by corpus content hash.
	IndexDir string `mapstructure:"index_dir" yaml:"index_dir"`
}

// Trainer configures the Tinker-API training server.
type Trainer struct {
	URL            string  `mapstructure:"url" yaml:"url"`
	APIKeyEnv      string  `mapstructure:"api_key_env" yaml:"api_key_env"`
	BaseModel      string  `mapstructure:"base_model" yaml:"base_model"`
	LoRARank       int     `mapstructure:"lora_rank" yaml:"lora_rank"`
	LearningRate   float64 `mapstructure:"learning_rate" yaml:"learning_rate"`
	Loss           string  `mapstructure:"loss" yaml:"loss"`
	ClipLow        float64 `mapstructure:"clip_low" yaml:"clip_low"`
	ClipHigh       float64 `mapstructure:"clip_high" yaml:"clip_high"`
	Beta1          float64 `mapstructure:"beta1" yaml:"beta1"`
	Beta2          float64 `mapstructure:"beta2" yaml:"beta2"`
	Eps            float64 `mapstructure:"eps" yaml:"eps"`
	WeightDecay    float64 `mapstructure:"weight_decay" yaml:"weight_decay"`
	CheckpointsDir string  `mapstructure:"checkpoints_dir" yaml:"checkpoints_dir"`
	// ChunkSize is the number of datums per forward_backward call.
	ChunkSize int `mapstructure:"chunk_size" yaml:"chunk_size"`
}

// Sync configures how new weights reach the policy servers.
type Sync struct {
	Kind string `mapstructure:"kind" yaml:"kind"`
	Dir  string `mapstructure:"dir" yaml:"dir"`
	// Keep is how many adapters stay loaded on each replica.
	Keep int `mapstructure:"keep" yaml:"keep"`
}

// Train configures the training loop.
type Train struct {
	Steps     int      `mapstructure:"steps" yaml:"steps"`
	BatchSize int      `mapstructure:"batch_size" yaml:"batch_size"`
	GroupSize int      `mapstructure:"group_size" yaml:"group_size"`
	Data      []string `mapstructure:"data" yaml:"data"`
	// Temperature, TopP and TopK are the training sampling settings.
	Temperature float64 `mapstructure:"temperature" yaml:"temperature"`
	TopP        float64 `mapstructure:"top_p" yaml:"top_p"`
	TopK        int     `mapstructure:"top_k" yaml:"top_k"`
}

// Rollout configures one trajectory.
type Rollout struct {
	MaxTurns int `mapstructure:"max_turns" yaml:"max_turns"`
	// MaxTurnTokens caps the tokens generated per turn.
	MaxTurnTokens int `mapstructure:"max_turn_tokens" yaml:"max_turn_tokens"`
	// MaxObsTokens caps the tokens of one <information> block.
	MaxObsTokens int `mapstructure:"max_obs_tokens" yaml:"max_obs_tokens"`
	// MaxContextTokens caps prompt plus response.
	MaxContextTokens int `mapstructure:"max_context_tokens" yaml:"max_context_tokens"`
}

// Hindsight configures the critique and the on-policy-distillation term.
type Hindsight struct {
	Enabled    bool   `mapstructure:"enabled" yaml:"enabled"`
	GoldAnswer bool   `mapstructure:"gold_answer" yaml:"gold_answer"`
	Loss       string `mapstructure:"loss" yaml:"loss"`
	Broadcast  string `mapstructure:"broadcast" yaml:"broadcast"`
	// Teacher is self, initial, or a model name served by the policy servers.
	Teacher    string  `mapstructure:"teacher" yaml:"teacher"`
	Coef       float64 `mapstructure:"coef" yaml:"coef"`
	Clamp      float64 `mapstructure:"clamp" yaml:"clamp"`
	RedactGold bool    `mapstructure:"redact_gold" yaml:"redact_gold"`
	// MaxCritiqueChars rejects longer critiques (counted, not fatal).
	MaxCritiqueChars int `mapstructure:"max_critique_chars" yaml:"max_critique_chars"`
	// Prompt is the judge prompt template; see orchestrator.DefaultJudgePrompt.
	Prompt string `mapstructure:"prompt" yaml:"prompt"`
	// HintTemplate formats the critique inserted before the question in the
	// teacher context; {critique} is replaced.
	HintTemplate string `mapstructure:"hint_template" yaml:"hint_template"`
}

// Eval configures periodic greedy evaluation.
type Eval struct {
	Every int `mapstructure:"every" yaml:"every"`
	// Datasets maps a dataset name to its file.
	Datasets map[string]string `mapstructure:"datasets" yaml:"datasets"`
	// PerDataset is the number of questions per dataset (0: whole file).
	PerDataset int `mapstructure:"per_dataset" yaml:"per_dataset"`
}

// Output configures the run directory.
type Output struct {
	Dir string `mapstructure:"dir" yaml:"dir"`
	// Trajectories is how many trajectories per step are kept for inspection.
	Trajectories int `mapstructure:"trajectories" yaml:"trajectories"`
}

// HTTP configures the shared transport of every client.
type HTTP struct {
	TimeoutSeconds float64 `mapstructure:"timeout_seconds" yaml:"timeout_seconds"`
	Retries        int     `mapstructure:"retries" yaml:"retries"`
	RetryWaitMinMS int     `mapstructure:"retry_wait_min_ms" yaml:"retry_wait_min_ms"`
	RetryWaitMaxMS int     `mapstructure:"retry_wait_max_ms" yaml:"retry_wait_max_ms"`
	PoolSize       int     `mapstructure:"pool_size" yaml:"pool_size"`
}

// Sim configures the embedded simulator (used only by embedded roles).
type Sim struct {
	// Epsilon is the simulated policy's uniform floor over the vocabulary.
	Epsilon float64 `mapstructure:"epsilon" yaml:"epsilon"`
}
