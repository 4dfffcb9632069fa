package trainer

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/hindsearch/hindsearch/clients/transport"
)

// The Tinker API samples as well as trains (docs/conformance.md, "Tinker
// sampling"): a sampling session names weights (a base model, or sampler
// weights by tinker:// path), asample samples from it as a future, and
// save_weights_for_sampler without a name makes an ephemeral sampler
// checkpoint with a sampling session over it (the SDK's
// save_weights_and_get_sampling_client). These calls live here because
// they share the training calls' session, seq_ids and futures; the
// policy-side client is clients/policy/tinker.

// SamplerSession is a sampling session over sampler weights saved by
// SaveForSampling.
type SamplerSession struct {
	// SessionID is the sampling session's id (sampling_session_id), which
	// asample names.
	SessionID string
	// CheckpointID is the sampler checkpoint's id on the model, as
	// DeleteCheckpoint takes it ("sampler_weights/ss<N>_seq<M>" on SkyRL,
	// which names an ephemeral save after the sampling_session_seq_id and
	// seq_id it was sent with; the hosted service keeps its ephemeral
	// checkpoints itself, so deleting this id there finds nothing).
	CheckpointID string
	// Path is the checkpoint's tinker:// path
	// (tinker://<model_id>/sampler_weights/ss<N>_seq<M>): a sampling
	// session over the same weights can be made from it on SkyRL
	// (CreateSamplingSession).
	Path string
}

// NextSamplingSeq returns the session's next sampling_session_seq_id: the
// SDK counts them per session, shared by every sampling client made in
// it (internal_client_holder.py _sampling_client_counter).
func (s *Session) NextSamplingSeq() int {
	return int(s.sampling.Add(1) - 1)
}

// SaveForSampling saves modelID's current weights for sampling the way the
// SDK's save_weights_and_get_sampling_client does: POST
// save_weights_for_sampler with the model's next seq_id and the session's
// next sampling_session_seq_id and no path, resolved as a future whose
// result names the sampling session the server made over them. SkyRL
// takes such a save as transient (persist=False: its FSDP and Megatron
// backends only broadcast the weights to their inference engines and
// write a marker, no model export) and names its checkpoint
// ss<N>_seq<M>. note, when set, is called with the checkpoint's id
// before the request is sent (the run's retention ledger records it
// first), and its error stops the save. When a repeat of the request is
// answered 409 "already exists" (an earlier attempt reached the server),
// the save is taken as done once the model's checkpoint listing shows it
// completed, and a sampling session is made from its path.
func (c *Client) SaveForSampling(ctx context.Context, s *Session, modelID string, note func(checkpointID string) error) (SamplerSession, error) {
	const op = "save_weights_for_sampler"
	if s == nil || s.ID == "" {
		return SamplerSession{}, fmt.Errorf("trainer %s: no session", op)
	}
	if modelID == "" {
		return SamplerSession{}, fmt.Errorf("trainer %s: no model id", op)
	}
	m := c.model(modelID)
	m.mu.Lock()
	m.last++
	seq, ss := m.last, s.NextSamplingSeq()
	name := fmt.Sprintf("ss%d_seq%d", ss, seq)
	out := SamplerSession{CheckpointID: "sampler_weights/" + name, Path: "tinker://" + modelID + "/sampler_weights/" + name}
	if note != nil {
		if err := note(out.CheckpointID); err != nil {
			m.last--
			m.mu.Unlock()
			return SamplerSession{}, err
		}
	}
	body := map[string]any{"model_id": modelID, "seq_id": seq, "sampling_session_seq_id": ss, "type": op}
	reqID, err := c.submit(ctx, op, body)
	m.mu.Unlock()
	recover := func(cause error) (SamplerSession, error) {
		path, err := c.awaitCheckpoint(ctx, op, "sampler", modelID, name, cause)
		if err != nil {
			return SamplerSession{}, err
		}
		out.SessionID, err = c.CreateSamplingSession(ctx, s, "", path)
		return out, err
	}
	if err != nil {
		if se := checkpointExists(err); se != nil && se.Attempts > 1 {
			return recover(err)
		}
		return SamplerSession{}, err
	}
	var res struct {
		SamplingSessionID string `json:"sampling_session_id"`
	}
	if err := c.resolveAll(ctx, op, body, &m.mu, reqID, &res); err != nil {
		if checkpointExists(err) != nil {
			return recover(err)
		}
		return SamplerSession{}, err
	}
	if res.SamplingSessionID == "" {
		return SamplerSession{}, fmt.Errorf("trainer %s %s: no sampling_session_id in the result of a save with sampling_session_seq_id %d (a server that cannot sample?)", op, c.URL(), ss)
	}
	out.SessionID = res.SamplingSessionID
	return out, nil
}

// CreateSamplingSession makes a sampling session in session s over the
// base model baseModel or the sampler weights at modelPath (a tinker://
// path; exactly one of the two) and returns its id (POST
// create_sampling_session, answered at once, not as a future). Repeating
// it is harmless (a second session over the same weights), so its
// transient failures are retried.
func (c *Client) CreateSamplingSession(ctx context.Context, s *Session, baseModel, modelPath string) (string, error) {
	const op = "create_sampling_session"
	if s == nil || s.ID == "" {
		return "", fmt.Errorf("trainer %s: no session", op)
	}
	if (baseModel == "") == (modelPath == "") {
		return "", fmt.Errorf("trainer %s: want exactly one of a base model and a model path", op)
	}
	if modelPath != "" && !strings.HasPrefix(modelPath, "tinker://") {
		// The SDK refuses it before sending (internal_client_holder.py).
		return "", fmt.Errorf("trainer %s: model path %q must start with tinker://", op, modelPath)
	}
	body := map[string]any{"session_id": s.ID, "sampling_session_seq_id": s.NextSamplingSeq(), "type": op}
	if baseModel != "" {
		body["base_model"] = baseModel
	} else {
		body["model_path"] = modelPath
	}
	var resp struct {
		SamplingSessionID string `json:"sampling_session_id"`
	}
	if err := c.do(ctx, http.MethodPost, op, body, &resp); err != nil {
		return "", fmt.Errorf("trainer %s: %w", op, err)
	}
	if resp.SamplingSessionID == "" {
		return "", fmt.Errorf("trainer %s %s: no sampling_session_id in response", op, c.URL())
	}
	return resp.SamplingSessionID, nil
}

// Submit POSTs body to the future route op (relative to /api/v1/) with
// the call options opt and returns the future's request id; ResolveBinary
// waits for its result. They serve routes that change no model state and so
// need no seq_id ordering (asample); a training call goes through the
// methods of its own.
func (c *Client) Submit(ctx context.Context, op string, body any, opt transport.Call) (string, error) {
	var f struct {
		RequestID string `json:"request_id"`
	}
	if err := c.do(ctx, http.MethodPost, op, body, &f, opt); err != nil {
		return "", fmt.Errorf("trainer %s: %w", op, err)
	}
	if f.RequestID == "" {
		return "", fmt.Errorf("trainer %s %s: no request_id in response", op, c.URL())
	}
	return f.RequestID, nil
}

// ErrExpired is ResolveBinary's error for a future the server no longer
// has (410): the request must be submitted again.
var ErrExpired = errExpired

// ResolveBinary polls retrieve_future for request reqID of route op until
// it resolves, for a route whose result can come as protobuf: a 408
// (SkyRL's held poll) or a try_again answer is polled again; a failed
// future (SkyRL's 400 {"detail"}, the hosted service's 200 {"error",
// "category"}) is a *RequestError; a 410 is ErrExpired. Every poll sends
// headers (e.g. Accept: application/x-protobuf, as the SDK asks for sample
// results), and the result is returned as it came, JSON or binary; binary
// checks a binary answer (one it refuses is malformed, and polled again).
func (c *Client) ResolveBinary(ctx context.Context, op, reqID string, headers map[string]string, binary func([]byte) error) ([]byte, error) {
	return c.resolveAs(ctx, op, reqID, headers, binary)
}
