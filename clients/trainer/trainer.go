// Package trainer is the client of the trainer role: a server of the Tinker
// training API in JSON (PROTOCOLS.md §5), such as SkyRL tx or the hosted
// service. Calls on a model carry ordered seq_ids; every training call is a
// future resolved through retrieve_future.
package trainer

import (
	"context"
	"sync/atomic"
)

// Trainer is what the orchestrator needs from the training server.
type Trainer interface {
	// Capabilities lists the base models the server can train.
	Capabilities(ctx context.Context) ([]string, error)
	// StartSession creates a session and keeps it alive with a heartbeat
	// every interval until ctx ends or Close is called on the result.
	StartSession(ctx context.Context) (*Session, error)
	// CreateModel creates a model of baseModel in session s (a LoRA
	// adapter of the given rank, or full weights for rank 0, its LoRA
	// initialisation seeded by seed) and returns its model id; it never
	// makes two models for one call.
	CreateModel(ctx context.Context, s *Session, baseModel string, rank int, seed int64) (string, error)
	// ForwardBackward sends one chunk of datums and waits for the result.
	ForwardBackward(ctx context.Context, modelID string, data []Datum, lossFn string, lossCfg map[string]float64) (*ForwardBackwardResult, error)
	// OptimStep applies the accumulated gradients.
	OptimStep(ctx context.Context, modelID string, adam AdamParams) (map[string]float64, error)
	// SaveWeightsForSampler saves the current weights under name and
	// returns the server's path for them (tinker://...).
	SaveWeightsForSampler(ctx context.Context, modelID, name string) (string, error)
	// SaveState saves the full training state (weights and optimiser) and
	// returns its path; LoadState restores one into a model as its first
	// call, for an exact resume. Both, like SaveWeightsForSampler, succeed
	// once when an answer was lost and the retry found the work done.
	SaveState(ctx context.Context, modelID, name string) (string, error)
	LoadState(ctx context.Context, modelID, path string) error
	// SaveForSampling saves modelID's current weights as an ephemeral
	// sampler checkpoint with a sampling session over them, in session s
	// (sync.kind tinker); note, when set, gets the checkpoint's id before
	// the request is sent.
	SaveForSampling(ctx context.Context, s *Session, modelID string, note func(checkpointID string) error) (SamplerSession, error)
	// UnloadModel releases modelID on the server and waits for the
	// release (its checkpoints stay); a model the server does not know,
	// or no longer holds, is already released: nil.
	UnloadModel(ctx context.Context, modelID string) error
	// DeleteCheckpoint deletes checkpoint id of modelID on the server:
	// id is "weights/<name>" (a training state) or
	// "sampler_weights/<name>" (sampler weights). A checkpoint the server
	// does not have is already deleted: nil; one still being saved is
	// asked again after a wait, a bounded number of times.
	DeleteCheckpoint(ctx context.Context, modelID, id string) error
	// URL is the server's base URL.
	URL() string
}

// Session is a live Tinker session.
type Session struct {
	// ID is the server's session id.
	ID   string
	stop func()
	// sampling counts the sampling_session_seq_ids used in the session.
	sampling atomic.Int64
}

// Close stops the session's heartbeat.
func (s *Session) Close() {
	if s != nil && s.stop != nil {
		s.stop()
	}
}

// Datum is one training example in the Tinker JSON form.
type Datum struct {
	ModelInput   ModelInput            `json:"model_input"`
	LossFnInputs map[string]TensorData `json:"loss_fn_inputs"`
}

// ModelInput is the model's input, as chunks.
type ModelInput struct {
	Chunks []Chunk `json:"chunks"`
}

// Chunk is one chunk of model input; only "encoded_text" is used.
type Chunk struct {
	Type   string `json:"type"`
	Tokens []int  `json:"tokens"`
}

// TensorData is a flat tensor. Data holds []int64 for dtype "int64" and
// []float32 for dtype "float32" when built by this package; decoded
// responses hold []any.
type TensorData struct {
	Data  any    `json:"data"`
	Dtype string `json:"dtype"`
	Shape []int  `json:"shape"`
}

// Int64Tensor builds an int64 TensorData of shape [len(v)].
func Int64Tensor(v []int64) TensorData {
	return TensorData{Data: v, Dtype: "int64", Shape: []int{len(v)}}
}

// Float32Tensor builds a float32 TensorData of shape [len(v)].
func Float32Tensor(v []float32) TensorData {
	return TensorData{Data: v, Dtype: "float32", Shape: []int{len(v)}}
}

// AdamParams are the optimiser settings of one optim_step.
type AdamParams struct {
	LearningRate float64 `json:"learning_rate"`
	Beta1        float64 `json:"beta1"`
	Beta2        float64 `json:"beta2"`
	Eps          float64 `json:"eps"`
	WeightDecay  float64 `json:"weight_decay"`
}

// ForwardBackwardResult is the result of one forward_backward call.
type ForwardBackwardResult struct {
	LossFnOutputs []map[string]TensorData `json:"loss_fn_outputs"`
	Metrics       map[string]float64      `json:"metrics"`
}
