// Package trainertest is the contract suite of the trainer role: the
// subtests every backend of clients/trainer's Trainer interface (a client
// and the Tinker API server it speaks to: SkyRL's JAX or FSDP backend, the
// hosted service, their simulator) must pass. The behaviours are those
// docs/conformance.md records in its "Tinker API" sections; each subtest
// names the section it comes from.
//
// A new backend implements trainer.Trainer, writes a test that returns a
// Backend for a fresh server, and calls Run. The package imports no
// simulator: Backend's hooks are how a test makes its server lose an
// answer or tells a save still running.
package trainertest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/trainer"
)

// Backend is one fresh Tinker API server and the client under test that
// speaks to it. Run asks for a new Backend in every subtest; the function
// that makes it registers the cleanup of its server and client.
type Backend struct {
	// Trainer is the client under test.
	Trainer trainer.Trainer
	// Checkpoints lists a model's completed checkpoints as the client
	// reads them (GET training_runs/{id}/checkpoints).
	Checkpoints func(ctx context.Context, modelID string) ([]trainer.Checkpoint, error)
	// BaseModel is a model the server trains, and Rank the LoRA rank
	// create_model asks for (0: full weights, SkyRL's FSDP backend).
	BaseModel string
	Rank      int
	// Tokens is a token sequence of BaseModel's vocabulary (at least four
	// ids), trained on as one datum.
	Tokens []int
	// Lose makes the server handle its next n requests to route (a path
	// such as "/api/v1/save_weights") in full and then drop the answers,
	// as a network that loses an answer does.
	Lose func(route string, n int)
	// NoDeleteRoute says the server has no DELETE checkpoint route (SkyRL
	// before 2026-07-16: skyrl 0.3.0 from PyPI): every DeleteCheckpoint
	// must then fail with an error wrapping trainer.ErrNoDeleteRoute and
	// leave the checkpoint listed, never pass for a deletion.
	NoDeleteRoute bool
	// SavePending reports whether the checkpoint name of modelID exists
	// on the server and is still being saved (SkyRL's 425); nil skips the
	// subtest that deletes a checkpoint while it is saved.
	SavePending func(modelID, name string) bool
}

// Run runs the contract suite against the backends newBackend makes, one
// per subtest.
func Run(t *testing.T, newBackend func(t *testing.T) *Backend) {
	for _, st := range []struct {
		name string
		fn   func(t *testing.T, b *Backend)
	}{
		{"CapabilitiesListTheBaseModel", capabilities},
		{"SessionAndCreateModel", createModel},
		{"ForwardBackwardAndOptimStepFuturesResolve", training},
		{"SaveWeightsForSamplerPath", samplerPath},
		{"SaveStateLoadsIntoANewModel", stateRoundTrip},
		{"UnloadModelIsIdempotent", unload},
		{"DeleteCheckpointBothKinds", deleteBoth},
		{"DeleteCheckpointStillBeingSavedWaits", deletePending},
		{"LostSaveAnswerIsRecoveredFromThe409", lostSave},
	} {
		t.Run(st.name, func(t *testing.T) { st.fn(t, newBackend(t)) })
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// newModel starts a session (closed with the test) and creates a model.
func newModel(t *testing.T, b *Backend) string {
	t.Helper()
	s, err := b.Trainer.StartSession(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if s.ID == "" {
		t.Fatal("session without an id")
	}
	id, err := b.Trainer.CreateModel(ctx(t), s, b.BaseModel, b.Rank, 1)
	if err != nil {
		t.Fatal(err)
	}
	if id == "" {
		t.Fatal("create_model gave no model id")
	}
	return id
}

// datum is one importance-sampling datum over b.Tokens: next-token
// targets, the second half weighted (the "response"), every tensor the
// model input's length.
func datum(b *Backend) trainer.Datum {
	n := len(b.Tokens) - 1
	targets := make([]int64, n)
	lps, advs, ws := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := 0; i < n; i++ {
		targets[i] = int64(b.Tokens[i+1])
		if i >= n/2 {
			ws[i], advs[i], lps[i] = 1, 1, -2
		}
	}
	return trainer.Datum{
		ModelInput: trainer.ModelInput{Chunks: []trainer.Chunk{{Type: "encoded_text", Tokens: b.Tokens[:n]}}},
		LossFnInputs: map[string]trainer.TensorData{"target_tokens": trainer.Int64Tensor(targets), "weights": trainer.Float32Tensor(ws),
			"logprobs": trainer.Float32Tensor(lps), "advantages": trainer.Float32Tensor(advs)},
	}
}

var adam = trainer.AdamParams{LearningRate: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}

// step runs one forward_backward and one optim_step on id.
func step(t *testing.T, b *Backend, id string) {
	t.Helper()
	res, err := b.Trainer.ForwardBackward(ctx(t), id, []trainer.Datum{datum(b), datum(b)}, "importance_sampling", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.LossFnOutputs) != 2 {
		t.Errorf("forward_backward: %d loss_fn_outputs for 2 datums", len(res.LossFnOutputs))
	}
	if _, err := b.Trainer.OptimStep(ctx(t), id, adam); err != nil {
		t.Fatal(err)
	}
}

// conformance.md "Tinker API: sessions, futures and training calls"
// (get_server_capabilities).
func capabilities(t *testing.T, b *Backend) {
	models, err := b.Trainer.Capabilities(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range models {
		if m == b.BaseModel {
			return
		}
	}
	t.Errorf("capabilities %q do not list %q", models, b.BaseModel)
}

// conformance.md "Tinker API: sessions, futures and training calls"
// (create_session, create_model lora_config {rank, seed}).
func createModel(t *testing.T, b *Backend) {
	if b.Trainer.URL() == "" {
		t.Error("empty URL")
	}
	newModel(t, b)
}

// conformance.md "Tinker API: sessions, futures and training calls"
// (forward_backward, optim_step, retrieve_future: SkyRL's held poll and
// 408, the hosted service's try_again): every call's future resolves, in
// seq_id order, over several steps.
func training(t *testing.T, b *Backend) {
	id := newModel(t, b)
	for range 3 {
		step(t, b, id)
	}
}

// conformance.md "Tinker API: sampler paths and archive layouts"
// (save_weights_for_sampler: tinker://<model_id>/<name>, the hosted
// service's tinker://<run>/sampler_weights/<name>): the path names the
// model and the checkpoint, and the listing shows it completed.
func samplerPath(t *testing.T, b *Backend) {
	id := newModel(t, b)
	step(t, b, id)
	path, err := b.Trainer.SaveWeightsForSampler(ctx(t), id, "contract-s1")
	if err != nil {
		t.Fatal(err)
	}
	if path != "tinker://"+id+"/contract-s1" && path != "tinker://"+id+"/sampler_weights/contract-s1" {
		t.Errorf("sampler path %q: want tinker://%s/[sampler_weights/]contract-s1", path, id)
	}
	if !listed(t, b, id, "sampler", "contract-s1") {
		t.Error("the sampler checkpoint is not listed")
	}
}

func listed(t *testing.T, b *Backend, id, typ, name string) bool {
	t.Helper()
	cks, err := b.Checkpoints(ctx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cks {
		if c.ID == name && c.Type == typ {
			return true
		}
	}
	return false
}

// conformance.md "Tinker API: sampler paths and archive layouts"
// (save_weights: tinker://<model_id>/weights/<name>; load_weights reads
// it) and "model lifetime and checkpoint retention" (unload_model keeps
// the checkpoints; FSDP holds one model at a time): a state saved by one
// model loads into the next as its first call.
func stateRoundTrip(t *testing.T, b *Backend) {
	id := newModel(t, b)
	step(t, b, id)
	path, err := b.Trainer.SaveState(ctx(t), id, "contract-w1")
	if err != nil {
		t.Fatal(err)
	}
	if path != "tinker://"+id+"/weights/contract-w1" {
		t.Errorf("state path %q: want tinker://%s/weights/contract-w1", path, id)
	}
	if err := b.Trainer.UnloadModel(ctx(t), id); err != nil {
		t.Fatal(err)
	}
	next := newModel(t, b)
	if err := b.Trainer.LoadState(ctx(t), next, path); err != nil {
		t.Fatal(err)
	}
	step(t, b, next)
}

// conformance.md "Tinker API: model lifetime and checkpoint retention"
// (unload_model: a future answering "unloaded"; 404 "Model not found" is
// already released).
func unload(t *testing.T, b *Backend) {
	id := newModel(t, b)
	for i := range 2 {
		if err := b.Trainer.UnloadModel(ctx(t), id); err != nil {
			t.Fatalf("unload %d: %v", i+1, err)
		}
	}
	if err := b.Trainer.UnloadModel(ctx(t), "model_contract_unknown"); err != nil {
		t.Errorf("unload of an unknown model: %v, want nil", err)
	}
	// The slot is free again (SkyRL's FSDP backend holds one model).
	newModel(t, b)
}

// conformance.md "Tinker API: model lifetime and checkpoint retention"
// (DELETE training_runs/{id}/checkpoints/{weights|sampler_weights}/{name}:
// 204, then 404 "Checkpoint not found", which the client takes for done;
// a server without the route answers FastAPI's bare 404, which must not).
func deleteBoth(t *testing.T, b *Backend) {
	id := newModel(t, b)
	if _, err := b.Trainer.SaveWeightsForSampler(ctx(t), id, "contract-s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Trainer.SaveState(ctx(t), id, "contract-w1"); err != nil {
		t.Fatal(err)
	}
	for _, ck := range []struct{ typ, id, name string }{{"sampler", "sampler_weights/contract-s1", "contract-s1"}, {"training", "weights/contract-w1", "contract-w1"}} {
		if b.NoDeleteRoute {
			err := b.Trainer.DeleteCheckpoint(ctx(t), id, ck.id)
			if !errors.Is(err, trainer.ErrNoDeleteRoute) {
				t.Errorf("delete %s on a server without the route: %v, want an error wrapping trainer.ErrNoDeleteRoute", ck.id, err)
			}
			if !listed(t, b, id, ck.typ, ck.name) {
				t.Errorf("%s is no longer listed, yet the server has no DELETE route", ck.id)
			}
			continue
		}
		for i := range 2 {
			if err := b.Trainer.DeleteCheckpoint(ctx(t), id, ck.id); err != nil {
				t.Fatalf("delete %s (%d): %v", ck.id, i+1, err)
			}
		}
		if listed(t, b, id, ck.typ, ck.name) {
			t.Errorf("%s still listed after its delete", ck.id)
		}
	}
	if err := b.Trainer.DeleteCheckpoint(ctx(t), id, "contract-bare"); err == nil || !strings.Contains(err.Error(), "weights/<name>") {
		t.Errorf("delete of a bare name: %v, want the typed-id error", err)
	}
}

// conformance.md "Tinker API: model lifetime and checkpoint retention"
// (425 "Checkpoint is still being created": asked again after a growing
// wait): a delete racing a save waits for it and then deletes.
func deletePending(t *testing.T, b *Backend) {
	if b.SavePending == nil {
		t.Skip("the backend cannot tell a save still running")
	}
	if b.NoDeleteRoute {
		t.Skip("the server has no DELETE checkpoint route (DeleteCheckpointBothKinds checks its refusal)")
	}
	id := newModel(t, b)
	done := make(chan error, 1)
	go func() {
		_, err := b.Trainer.SaveWeightsForSampler(ctx(t), id, "contract-s1")
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !b.SavePending(id, "contract-s1") {
		if time.Now().After(deadline) {
			t.Fatal("the save never showed as pending: make the backend's saves slower")
		}
		time.Sleep(time.Millisecond)
	}
	if err := b.Trainer.DeleteCheckpoint(ctx(t), id, "sampler_weights/contract-s1"); err != nil {
		t.Fatalf("delete while saving: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the save: %v", err)
	}
	if listed(t, b, id, "sampler", "contract-s1") {
		t.Error("the checkpoint is listed after its delete")
	}
}

// conformance.md "What this record changed" (issue 12, defect 5: a lost
// save answer is recognised) and "model lifetime and checkpoint retention"
// (the 409 "already exists" of a repeated save, the listing): a save whose
// answer was lost returns the checkpoint's path once, and the state so
// recovered loads.
func lostSave(t *testing.T, b *Backend) {
	id := newModel(t, b)
	step(t, b, id)
	b.Lose("/api/v1/save_weights_for_sampler", 1)
	path, err := b.Trainer.SaveWeightsForSampler(ctx(t), id, "contract-s1")
	if err != nil {
		t.Fatalf("sampler save with a lost answer: %v", err)
	}
	if !strings.HasPrefix(path, "tinker://"+id+"/") || !strings.HasSuffix(path, "/contract-s1") {
		t.Errorf("recovered sampler path %q", path)
	}
	b.Lose("/api/v1/save_weights", 1)
	state, err := b.Trainer.SaveState(ctx(t), id, "contract-w1")
	if err != nil {
		t.Fatalf("state save with a lost answer: %v", err)
	}
	if state != "tinker://"+id+"/weights/contract-w1" {
		t.Errorf("recovered state path %q: want tinker://%s/weights/contract-w1", state, id)
	}
	if err := b.Trainer.UnloadModel(ctx(t), id); err != nil {
		t.Fatal(err)
	}
	next := newModel(t, b)
	if err := b.Trainer.LoadState(ctx(t), next, state); err != nil {
		t.Fatalf("loading the recovered state: %v", err)
	}
}
