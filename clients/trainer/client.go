package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/hindsearch/hindsearch/clients/transport"
)

// Defaults of the Client's tunables.
const (
	// DefaultHeartbeatInterval is the time between session heartbeats
	// (SkyRL unloads the models of a session silent for 300 s).
	DefaultHeartbeatInterval = 10 * time.Second
	// DefaultPollWaitMin is the first wait after a try_again answer.
	DefaultPollWaitMin = 20 * time.Millisecond
	// DefaultPollWaitMax caps the wait between try_again answers.
	DefaultPollWaitMax = 200 * time.Millisecond
	// DefaultMaxResubmits bounds the re-submissions of a call whose future
	// expired (410).
	DefaultMaxResubmits = 3
	// SDKVersion is the sdk_version sent with create_session.
	SDKVersion = "hindsearch-0.1"
	// DefaultRecoveryTimeout bounds the wait for the checkpoint of a save
	// whose answer was lost to be listed as completed (the call's context
	// may end it sooner).
	DefaultRecoveryTimeout = 30 * time.Minute
	// DefaultListWaitMax caps the wait between two listings of a model's
	// checkpoints while waiting for one.
	DefaultListWaitMax = 2 * time.Second
	// DefaultDeleteTries bounds the DELETEs of one checkpoint answered 425
	// (still being saved).
	DefaultDeleteTries = 8
	// listPageSize is the limit of each GET training_runs page.
	listPageSize = 100
)

// Client is the Trainer of one Tinker API server (SkyRL tx or the hosted
// service), in JSON.
//
// Each model's calls (forward_backward, optim_step,
// save_weights_for_sampler, save_weights, load_weights) carry a seq_id that
// starts at 1 and grows by one per call; the model's mutex is held from the
// choice of the seq_id until the server accepted the POST, so seq_ids
// arrive in order. A POST retried by the transport, or re-submitted after
// its future expired (410), carries the same seq_id and body. A POST that
// failed outright still uses up its seq_id, so that a later call never
// reuses it with another body.
//
// SkyRL de-duplicates only forward, forward_backward and optim_step by
// (model_id, seq_id). The other calls are made safe to repeat here: a
// save whose retry is answered 409 "already exists" after an earlier
// attempt reached the server is taken as done, and its path read from the
// model's checkpoint listing once the checkpoint is completed; a
// load_weights retried on a model this client created, with no other call
// before it, and answered 400 "not permitted" is taken as done;
// create_model is never sent again after a failure that may follow the
// server's work unless the server's model listing shows it made no model
// (see CreateModel).
//
// Within a session, create_model calls carry a model_seq_id counted from 0.
//
// Set the exported fields before the first call.
type Client struct {
	tc *transport.Client
	// HeartbeatInterval is the time between session heartbeats
	// (DefaultHeartbeatInterval when zero).
	HeartbeatInterval time.Duration
	// PollWaitMin and PollWaitMax bound the growing wait between
	// retrieve_future polls answered try_again.
	PollWaitMin, PollWaitMax time.Duration
	// MaxResubmits bounds re-submissions after a 410 (expired future).
	MaxResubmits int
	// RecoveryTimeout bounds the wait for a save whose answer was lost to
	// be listed as completed (DefaultRecoveryTimeout when zero; the call's
	// context may end it sooner).
	RecoveryTimeout time.Duration
	// ListWaitMax caps the growing wait between checkpoint listings while
	// waiting (DefaultListWaitMax when zero).
	ListWaitMax time.Duration
	// DeleteTries bounds the DELETEs of a checkpoint answered 425, still
	// being saved (DefaultDeleteTries when zero); the wait between them
	// grows from PollWaitMin to ListWaitMax.
	DeleteTries int
	// Logger, when set, receives failed heartbeats and the calls whose
	// lost answers were recovered.
	Logger *slog.Logger

	mu       sync.Mutex
	models   map[string]*modelState
	sessions map[string]int // next model_seq_id
}

type modelState struct {
	mu   sync.Mutex
	last int // last seq_id used
	// created is set for a model this client made (CreateModel): no other
	// client sends it requests.
	created bool
}

var _ Trainer = (*Client)(nil)

// New builds the client of the Tinker server described by opts (opts.Role
// defaults to "trainer"). When apiKey is not empty it is sent as
// "X-API-Key"; it never appears in errors.
func New(opts transport.Options, apiKey string) (*Client, error) {
	if opts.Role == "" {
		opts.Role = "trainer"
	}
	headers := maps.Clone(opts.Headers)
	if apiKey != "" {
		if headers == nil {
			headers = map[string]string{}
		}
		headers["X-API-Key"] = apiKey
	}
	opts.Headers = headers
	tc, err := transport.New(opts)
	if err != nil {
		return nil, err
	}
	return &Client{
		tc:                tc,
		HeartbeatInterval: DefaultHeartbeatInterval,
		PollWaitMin:       DefaultPollWaitMin,
		PollWaitMax:       DefaultPollWaitMax,
		MaxResubmits:      DefaultMaxResubmits,
		RecoveryTimeout:   DefaultRecoveryTimeout,
		ListWaitMax:       DefaultListWaitMax,
		DeleteTries:       DefaultDeleteTries,
		models:            map[string]*modelState{},
		sessions:          map[string]int{},
	}, nil
}

// URL returns the server's base URL.
func (c *Client) URL() string { return c.tc.BaseURL() }

// Close closes idle connections. It does not stop sessions: close them.
func (c *Client) Close() { c.tc.Close() }

// do is the one path of every call to the server; route is relative to
// /api/v1/. An optional opt sets the call's retry rule (default
// transport.RetryTransient).
func (c *Client) do(ctx context.Context, method, route string, in, out any, opt ...transport.Call) error {
	var o transport.Call
	if len(opt) > 0 {
		o = opt[0]
	}
	return c.tc.DoCall(ctx, o, method, "/api/v1/"+route, in, out)
}

// RequestError is a training call that the server ran and reported failed.
type RequestError struct {
	// Op is the call ("forward_backward", ...).
	Op string
	// RequestID is the future's id.
	RequestID string
	// Category is the server's error category ("user", "server", ...), if
	// any.
	Category string
	// Message is the server's message.
	Message string
}

// Error returns e.g. "trainer forward_backward: request r1 failed (user):
// bad shape".
func (e *RequestError) Error() string {
	cat := ""
	if e.Category != "" {
		cat = " (" + e.Category + ")"
	}
	return fmt.Sprintf("trainer %s: request %s failed%s: %s", e.Op, e.RequestID, cat, e.Message)
}

// Healthz returns nil when GET /api/v1/healthz answers 2xx.
func (c *Client) Healthz(ctx context.Context) error {
	if err := c.do(ctx, http.MethodGet, "healthz", nil, nil); err != nil {
		return fmt.Errorf("trainer healthz: %w", err)
	}
	return nil
}

// Capabilities lists the base models the server can train (GET
// get_server_capabilities).
func (c *Client) Capabilities(ctx context.Context) ([]string, error) {
	var resp struct {
		SupportedModels []struct {
			ModelName string `json:"model_name"`
		} `json:"supported_models"`
	}
	if err := c.do(ctx, http.MethodGet, "get_server_capabilities", nil, &resp); err != nil {
		return nil, fmt.Errorf("trainer capabilities: %w", err)
	}
	out := make([]string, len(resp.SupportedModels))
	for i, m := range resp.SupportedModels {
		out[i] = m.ModelName
	}
	return out, nil
}

// StartSession creates a session (POST create_session) and sends a
// heartbeat every HeartbeatInterval until ctx ends or the session is
// closed; Close waits for the heartbeat goroutine to exit.
func (c *Client) StartSession(ctx context.Context) (*Session, error) {
	body := map[string]any{
		"tags":          []string{},
		"user_metadata": map[string]string{},
		"sdk_version":   SDKVersion,
		"type":          "create_session",
	}
	var resp struct {
		SessionID string `json:"session_id"`
	}
	if err := c.do(ctx, http.MethodPost, "create_session", body, &resp); err != nil {
		return nil, fmt.Errorf("trainer create session: %w", err)
	}
	if resp.SessionID == "" {
		return nil, fmt.Errorf("trainer create session %s: no session_id in response", c.URL())
	}
	interval := c.HeartbeatInterval
	if interval <= 0 {
		interval = DefaultHeartbeatInterval
	}
	hbCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go c.heartbeat(hbCtx, resp.SessionID, interval, done)
	return &Session{ID: resp.SessionID, stop: func() {
		cancel()
		<-done
	}}, nil
}

func (c *Client) heartbeat(ctx context.Context, id string, interval time.Duration, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(interval)
	defer t.Stop()
	body := map[string]string{"session_id": id, "type": "session_heartbeat"}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.do(ctx, http.MethodPost, "session_heartbeat", body, nil); err != nil && ctx.Err() == nil && c.Logger != nil {
			c.Logger.Warn("trainer heartbeat failed", "session", id, "err", err)
		}
	}
}

// CreateModel creates a model of baseModel in session s (POST
// create_model, resolved as a future) and returns its id. rank is
// lora_config.rank: a LoRA adapter of that rank, or 0 for full fine-tuning
// (SkyRL's FSDP and Megatron backends; its JAX backend and the hosted
// service train LoRA only). seed is lora_config.seed, the seed of the LoRA
// weights' initialisation: SkyRL and the hosted service draw a random one
// when none is sent, so it is always sent, and the same recipe starts from
// the same adapter.
//
// The server makes a new model for every create_model that reaches it, so
// the POST is never retried blindly: it is sent with transport.RetryUnsent
// (retried only when the connection could not be made). After a failure
// that may follow the server's work (a lost or cut-short answer, a
// timeout, 408, 429, 5xx, an expired future), the server's models (GET
// training_runs, also read before the call) are listed again: exactly one
// new model of baseModel and rank is adopted as this call's; none means
// the server made none, and the same body is sent again after a backoff
// (at most the transport's retries); several, or a listing that fails, is
// an error naming the trainer's URL. An adopted model's future is not
// resolved (its request id was in the lost answer): a model the server
// failed to build makes the first call on it fail.
func (c *Client) CreateModel(ctx context.Context, s *Session, baseModel string, rank int, seed int64) (string, error) {
	if s == nil || s.ID == "" {
		return "", errors.New("trainer create model: no session")
	}
	if baseModel == "" || rank < 0 {
		return "", fmt.Errorf("trainer create model: base model %q rank %d: want a model and rank >= 0 (0: full weights)", baseModel, rank)
	}
	c.mu.Lock()
	seq := c.sessions[s.ID]
	c.sessions[s.ID] = seq + 1
	c.mu.Unlock()
	body := map[string]any{
		"session_id":   s.ID,
		"model_seq_id": seq,
		"base_model":   baseModel,
		"lora_config":  map[string]any{"rank": rank, "seed": seed},
		"type":         "create_model",
	}
	before, listErr := c.TrainingRuns(ctx)
	for try := 0; ; try++ {
		id, maybe, err := c.createOnce(ctx, body)
		if err == nil {
			c.adopt(id)
			return id, nil
		}
		if !maybe || ctx.Err() != nil {
			return "", err
		}
		if listErr != nil {
			return "", fmt.Errorf("%w; the server may have made a model that this run cannot identify (listing GET %s/api/v1/training_runs before the call failed: %v): check the server's models before running again", err, c.URL(), listErr)
		}
		after, lerr := c.TrainingRuns(ctx)
		if lerr != nil {
			return "", fmt.Errorf("%w; the server may have made a model, and listing GET %s/api/v1/training_runs to find it failed: %v", err, c.URL(), lerr)
		}
		found := newModels(before, after, baseModel, rank)
		switch {
		case len(found) == 1:
			c.adopt(found[0])
			if c.Logger != nil {
				c.Logger.Warn("trainer create_model answer lost: adopted the model the server made", "trainer", c.URL(), "model", found[0], "err", err)
			}
			return found[0], nil
		case len(found) > 1:
			return "", fmt.Errorf("%w; %d new models of %s with rank %d appeared on %s (%s): cannot tell which one is this run's", err, len(found), baseModel, rank, c.URL(), strings.Join(found, ", "))
		case try >= c.tc.Retries():
			return "", fmt.Errorf("%w (sent %d times; GET %s/api/v1/training_runs shows no model made)", err, try+1, c.URL())
		}
		before = after
		if sleep(ctx, c.tc.Backoff(try)) != nil {
			return "", err
		}
	}
}

// createOnce sends create_model once (retried only when it could not be
// sent) and resolves its future. maybe reports a failure after which the
// server may have made the model.
func (c *Client) createOnce(ctx context.Context, body any) (id string, maybe bool, err error) {
	var f struct {
		RequestID string `json:"request_id"`
		ModelID   string `json:"model_id"`
	}
	if err := c.do(ctx, http.MethodPost, "create_model", body, &f, transport.Call{Retry: transport.RetryUnsent}); err != nil {
		var se *transport.StatusError
		refused := errors.As(err, &se) && se.Status >= 400 && se.Status < 500 &&
			se.Status != http.StatusRequestTimeout && se.Status != http.StatusTooManyRequests
		return "", !refused && !transport.NotSent(err), fmt.Errorf("trainer create_model: %w", err)
	}
	if f.RequestID == "" {
		return "", true, fmt.Errorf("trainer create_model %s: no request_id in response", c.URL())
	}
	raw, err := c.resolve(ctx, "create_model", f.RequestID)
	if errors.Is(err, errExpired) {
		return "", true, fmt.Errorf("trainer create_model: request %s: %w", f.RequestID, err)
	}
	if err != nil {
		return "", false, err
	}
	var res struct {
		ModelID string `json:"model_id"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return "", false, fmt.Errorf("trainer create_model %s: decode result: %w", c.URL(), err)
	}
	if res.ModelID == "" {
		res.ModelID = f.ModelID
	}
	if res.ModelID == "" {
		return "", false, fmt.Errorf("trainer create_model %s: no model_id in result", c.URL())
	}
	return res.ModelID, false, nil
}

// newModels returns the ids of the models in after, not in before, of
// baseModel with lora rank rank.
func newModels(before, after []TrainingRun, baseModel string, rank int) []string {
	seen := make(map[string]bool, len(before))
	for _, r := range before {
		seen[r.ID] = true
	}
	var out []string
	for _, r := range after {
		if !seen[r.ID] && r.BaseModel == baseModel && r.LoRARank != nil && *r.LoRARank == rank {
			out = append(out, r.ID)
		}
	}
	return out
}

// adopt records modelID as a model this client created.
func (c *Client) adopt(modelID string) {
	m := c.model(modelID)
	m.mu.Lock()
	m.created = true
	m.mu.Unlock()
}

// TrainingRun is one model on the server, as GET training_runs lists it.
type TrainingRun struct {
	// ID is the model's id (training_run_id).
	ID string `json:"training_run_id"`
	// BaseModel is the model it was created on.
	BaseModel string `json:"base_model"`
	// LoRARank is its lora_config.rank (0: full weights), nil when the
	// server does not say.
	LoRARank *int `json:"lora_rank"`
}

// TrainingRuns lists every model on the server (GET training_runs, read
// page by page with an explicit limit and offset until the cursor's
// total_count).
func (c *Client) TrainingRuns(ctx context.Context) ([]TrainingRun, error) {
	var all []TrainingRun
	for offset := 0; ; {
		var page struct {
			TrainingRuns []TrainingRun `json:"training_runs"`
			Cursor       struct {
				TotalCount int `json:"total_count"`
			} `json:"cursor"`
		}
		route := fmt.Sprintf("training_runs?limit=%d&offset=%d", listPageSize, offset)
		if err := c.do(ctx, http.MethodGet, route, nil, &page); err != nil {
			return nil, fmt.Errorf("trainer training_runs: %w", err)
		}
		all = append(all, page.TrainingRuns...)
		offset += len(page.TrainingRuns)
		if len(page.TrainingRuns) == 0 || offset >= page.Cursor.TotalCount {
			return all, nil
		}
	}
}

// Checkpoint is one completed checkpoint of a model, as GET
// training_runs/{model_id}/checkpoints lists it.
type Checkpoint struct {
	// ID is the name it was saved under (checkpoint_id).
	ID string `json:"checkpoint_id"`
	// Type is "training" (save_weights) or "sampler"
	// (save_weights_for_sampler).
	Type string `json:"checkpoint_type"`
	// TinkerPath is its tinker:// path.
	TinkerPath string `json:"tinker_path"`
}

// Checkpoints lists the completed checkpoints of modelID (GET
// training_runs/{model_id}/checkpoints).
func (c *Client) Checkpoints(ctx context.Context, modelID string) ([]Checkpoint, error) {
	if !checkpointName.MatchString(modelID) {
		return nil, fmt.Errorf("trainer checkpoints: model id %q: want letters, digits, _ and - only", modelID)
	}
	var resp struct {
		Checkpoints []Checkpoint `json:"checkpoints"`
	}
	if err := c.do(ctx, http.MethodGet, "training_runs/"+modelID+"/checkpoints", nil, &resp); err != nil {
		return nil, fmt.Errorf("trainer checkpoints: %w", err)
	}
	return resp.Checkpoints, nil
}

// model returns the state of modelID, creating it (last seq_id 0).
func (c *Client) model(id string) *modelState {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.models[id]
	if m == nil {
		m = &modelState{}
		c.models[id] = m
	}
	return m
}

// ResumeModel sets the last seq_id used on modelID, for a model whose
// earlier calls were made by another process; the next call uses
// lastSeqID+1.
func (c *Client) ResumeModel(modelID string, lastSeqID int) {
	m := c.model(modelID)
	m.mu.Lock()
	m.last = lastSeqID
	m.mu.Unlock()
}

// LastSeqID returns the last seq_id used on modelID (0 before any call).
func (c *Client) LastSeqID(modelID string) int {
	m := c.model(modelID)
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}

// modelCall takes modelID's next seq_id, builds the body with it, submits
// it in order and resolves the future into out.
func (c *Client) modelCall(ctx context.Context, op, modelID string, build func(seq int) any, out any) error {
	if modelID == "" {
		return fmt.Errorf("trainer %s: no model id", op)
	}
	m := c.model(modelID)
	m.mu.Lock()
	m.last++
	seq := m.last
	body := build(seq)
	reqID, err := c.submit(ctx, op, body)
	m.mu.Unlock()
	if transport.IsStatus(err, http.StatusConflict) {
		// SkyRL's 409 names no seq_id: "Training request sequence
		// number was reused".
		return fmt.Errorf("%w (seq_id %d of model %s was used before with another request)", err, seq, modelID)
	}
	if err != nil {
		return err
	}
	return c.resolveAll(ctx, op, body, &m.mu, reqID, out)
}

// submit POSTs body to route op and returns the future's request id.
func (c *Client) submit(ctx context.Context, op string, body any) (string, error) {
	return c.Submit(ctx, op, body, transport.Call{})
}

var errExpired = errors.New("future expired")

// resolveAll resolves reqID into out, re-submitting the same body (under
// lock, when set) when the future expired.
func (c *Client) resolveAll(ctx context.Context, op string, body any, lock *sync.Mutex, reqID string, out any) error {
	for resubmits := 0; ; resubmits++ {
		raw, err := c.resolve(ctx, op, reqID)
		if errors.Is(err, errExpired) {
			if resubmits >= c.MaxResubmits {
				return fmt.Errorf("trainer %s: request %s: future expired after %d resubmissions", op, reqID, resubmits)
			}
			if lock != nil {
				lock.Lock()
			}
			reqID, err = c.submit(ctx, op, body)
			if lock != nil {
				lock.Unlock()
			}
			if err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if out == nil {
			return nil
		}
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("trainer %s %s: decode result: %w", op, c.URL(), err)
		}
		return nil
	}
}

// resolve polls retrieve_future until the result of reqID is ready.
func (c *Client) resolve(ctx context.Context, op, reqID string) (json.RawMessage, error) {
	raw, err := c.resolveAs(ctx, op, reqID, nil, nil)
	return json.RawMessage(raw), err
}

// resolveAs is resolve with extra headers on every poll (an Accept that
// asks for a protobuf result): a result that is not JSON is returned as
// it came when binary accepts it, and an answer that is neither valid
// JSON nor accepted by binary counts as malformed (retried).
func (c *Client) resolveAs(ctx context.Context, op, reqID string, headers map[string]string, binary func([]byte) error) ([]byte, error) {
	wait := max(c.PollWaitMin, time.Millisecond)
	body := map[string]string{"request_id": reqID}
	for {
		out := &pollAnswer{binary: binary}
		// SkyRL holds a poll, then answers 408: poll again at once
		// rather than after the retry layer's backoff.
		err := c.do(ctx, http.MethodPost, "retrieve_future", body, out, transport.Call{Retry: transport.RetryPoll, Headers: headers})
		raw := out.raw
		if err != nil {
			var se *transport.StatusError
			switch {
			case ctx.Err() != nil:
				return nil, fmt.Errorf("trainer %s: request %s: %w", op, reqID, err)
			case errors.As(err, &se) && se.Status == http.StatusRequestTimeout:
				continue // the server held the poll: ask again
			case errors.As(err, &se) && se.Status == http.StatusGone:
				return nil, errExpired
			case errors.As(err, &se) && se.Status == http.StatusBadRequest:
				return nil, &RequestError{Op: op, RequestID: reqID, Message: detail(se.Body)}
			case isTimeout(err):
				continue // our own attempt timed out on a held poll
			default:
				return nil, fmt.Errorf("trainer %s: request %s: %w", op, reqID, err)
			}
		}
		if out.isBinary {
			return raw, nil // a protobuf result, asked for
		}
		var probe struct {
			Type     string          `json:"type"`
			Error    json.RawMessage `json:"error"`
			Category string          `json:"category"`
		}
		_ = json.Unmarshal(raw, &probe) // a result need not be an object
		if probe.Type == "try_again" {
			if err := sleep(ctx, wait); err != nil {
				return nil, fmt.Errorf("trainer %s: request %s: %w", op, reqID, err)
			}
			wait = min(wait*2, max(c.PollWaitMax, wait))
			continue
		}
		if e := strings.TrimSpace(string(probe.Error)); e != "" && e != "null" {
			return nil, &RequestError{Op: op, RequestID: reqID, Category: probe.Category, Message: jsonText(probe.Error)}
		}
		return raw, nil
	}
}

// pollAnswer is a retrieve_future answer: JSON, or a binary result that
// binary accepts. Anything else is malformed (the transport retries it).
type pollAnswer struct {
	binary   func([]byte) error
	raw      []byte
	isBinary bool
}

// DecodeJSON keeps a copy of body once it checks out.
func (p *pollAnswer) DecodeJSON(body []byte) error {
	switch {
	case looksJSON(body):
		if !json.Valid(body) {
			return errors.New("invalid JSON")
		}
	case p.binary == nil:
		return errors.New("not JSON")
	default:
		if err := p.binary(body); err != nil {
			return fmt.Errorf("not JSON, and not the binary result asked for: %w", err)
		}
		p.isBinary = true
	}
	p.raw = append(p.raw[:0], body...)
	return nil
}

// looksJSON reports whether b starts, after white space, as a JSON value
// does (a protobuf message of the results asked for starts with a field
// tag: 0x08 to 0x22).
func looksJSON(b []byte) bool {
	t := bytes.TrimLeft(b, " \t\r\n")
	return len(t) > 0 && strings.ContainsRune(`{["-0123456789tfn`, rune(t[0]))
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// detail extracts FastAPI's {"detail": ...} from a body start.
func detail(body string) string {
	var d struct {
		Detail json.RawMessage `json:"detail"`
	}
	if json.Unmarshal([]byte(body), &d) == nil && len(d.Detail) > 0 {
		return jsonText(d.Detail)
	}
	return strings.TrimSpace(body)
}

// jsonText renders a JSON string as its text and anything else as JSON.
func jsonText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

type forwardBackwardInput struct {
	Data         []Datum            `json:"data"`
	LossFn       string             `json:"loss_fn"`
	LossFnConfig map[string]float64 `json:"loss_fn_config,omitempty"`
}

// ForwardBackward sends data with loss lossFn (and lossCfg, omitted when
// nil) to POST forward_backward and waits for the result. Every tensor of a
// datum must have the length of its model input.
func (c *Client) ForwardBackward(ctx context.Context, modelID string, data []Datum, lossFn string, lossCfg map[string]float64) (*ForwardBackwardResult, error) {
	if len(data) == 0 {
		return nil, errors.New("trainer forward_backward: no data")
	}
	if lossFn == "" {
		return nil, errors.New("trainer forward_backward: no loss function")
	}
	for i, d := range data {
		if err := checkDatum(d); err != nil {
			return nil, fmt.Errorf("trainer forward_backward: datum %d: %w", i, err)
		}
	}
	in := forwardBackwardInput{Data: data, LossFn: lossFn, LossFnConfig: lossCfg}
	var res ForwardBackwardResult
	err := c.modelCall(ctx, "forward_backward", modelID, func(seq int) any {
		return map[string]any{"model_id": modelID, "seq_id": seq, "forward_backward_input": in}
	}, &res)
	if err != nil {
		return nil, err
	}
	return &res, nil
}

// checkDatum checks that every tensor has the model input's length.
func checkDatum(d Datum) error {
	n := 0
	for _, ch := range d.ModelInput.Chunks {
		n += len(ch.Tokens)
	}
	if n == 0 {
		return errors.New("empty model input")
	}
	for name, t := range d.LossFnInputs {
		l, ok := dataLen(t.Data)
		if !ok {
			return fmt.Errorf("tensor %s: unsupported data type %T", name, t.Data)
		}
		if l != n || len(t.Shape) != 1 || t.Shape[0] != n {
			return fmt.Errorf("tensor %s: length %d shape %v, want %d like the model input", name, l, t.Shape, n)
		}
	}
	return nil
}

func dataLen(v any) (int, bool) {
	switch d := v.(type) {
	case []int64:
		return len(d), true
	case []float32:
		return len(d), true
	case []float64:
		return len(d), true
	case []int:
		return len(d), true
	case []any:
		return len(d), true
	}
	return 0, false
}

// OptimStep applies the accumulated gradients with adam (POST optim_step)
// and returns the step's metrics.
func (c *Client) OptimStep(ctx context.Context, modelID string, adam AdamParams) (map[string]float64, error) {
	var res struct {
		Metrics map[string]float64 `json:"metrics"`
	}
	err := c.modelCall(ctx, "optim_step", modelID, func(seq int) any {
		return map[string]any{"model_id": modelID, "seq_id": seq, "adam_params": adam, "type": "optim_step"}
	}, &res)
	if err != nil {
		return nil, err
	}
	return res.Metrics, nil
}

var checkpointName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// SaveWeightsForSampler saves the current weights under name (POST
// save_weights_for_sampler) and returns the server's path (tinker://...).
// name must match ^[A-Za-z0-9_-]+$. When the server answers 409 "already
// exists" after an earlier attempt of this call reached it, the save is
// taken as done and the path is the one the model's checkpoint listing
// gives once the checkpoint is completed (SkyRL lists
// tinker://<model_id>/sampler_weights/<name>; its future answers
// tinker://<model_id>/<name>).
func (c *Client) SaveWeightsForSampler(ctx context.Context, modelID, name string) (string, error) {
	if !checkpointName.MatchString(name) {
		return "", fmt.Errorf("trainer save_weights_for_sampler: name %q: want letters, digits, _ and - only", name)
	}
	return c.save(ctx, "save_weights_for_sampler", "sampler", modelID, name, func(seq int) any {
		return map[string]any{"model_id": modelID, "path": name, "seq_id": seq}
	})
}

// save makes a save call (op, listed with checkpoint type ckType) and
// returns its path: the result's, or the listing's when a repeat of the
// call was answered 409 "already exists" (an earlier attempt, or the
// submission before a 410, reached the server).
func (c *Client) save(ctx context.Context, op, ckType, modelID, name string, build func(seq int) any) (string, error) {
	if modelID == "" {
		return "", fmt.Errorf("trainer %s: no model id", op)
	}
	m := c.model(modelID)
	m.mu.Lock()
	m.last++
	body := build(m.last)
	reqID, err := c.submit(ctx, op, body)
	m.mu.Unlock()
	if err != nil {
		if se := checkpointExists(err); se != nil && se.Attempts > 1 {
			return c.awaitCheckpoint(ctx, op, ckType, modelID, name, err)
		}
		return "", err
	}
	var res struct {
		Path string `json:"path"`
	}
	if err := c.resolveAll(ctx, op, body, &m.mu, reqID, &res); err != nil {
		if checkpointExists(err) != nil {
			// A resubmission after a 410 met the first submission's
			// checkpoint.
			return c.awaitCheckpoint(ctx, op, ckType, modelID, name, err)
		}
		return "", err
	}
	if res.Path == "" {
		return "", fmt.Errorf("trainer %s %s: no path in result", op, c.URL())
	}
	return res.Path, nil
}

// checkpointExists returns the 409 "already exists" answer in err, if any.
func checkpointExists(err error) *transport.StatusError {
	var se *transport.StatusError
	if errors.As(err, &se) && se.Status == http.StatusConflict && strings.Contains(se.Body, "already exists") {
		return se
	}
	return nil
}

// awaitCheckpoint waits, bounded by ctx and RecoveryTimeout, until the
// model's checkpoint listing shows name (of type ckType) completed, and
// returns its path; cause is the 409 that said an earlier attempt saved
// it.
func (c *Client) awaitCheckpoint(ctx context.Context, op, ckType, modelID, name string, cause error) (string, error) {
	limit := c.RecoveryTimeout
	if limit <= 0 {
		limit = DefaultRecoveryTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	wait := max(c.PollWaitMin, time.Millisecond)
	most := c.ListWaitMax
	if most <= 0 {
		most = DefaultListWaitMax
	}
	var last error
	for {
		cks, err := c.Checkpoints(ctx, modelID)
		switch {
		case err == nil:
			for _, ck := range cks {
				if ck.ID == name && ck.Type == ckType && ck.TinkerPath != "" {
					if c.Logger != nil {
						c.Logger.Warn("trainer save answer lost: the checkpoint was saved", "op", op, "model", modelID, "path", ck.TinkerPath)
					}
					return ck.TinkerPath, nil
				}
			}
			// Not listed: the listing shows completed checkpoints only,
			// so ask whether it failed rather than wait for nothing.
			if why := c.checkpointFailed(ctx, ckType, modelID, name); why != "" {
				return "", fmt.Errorf("%w; an earlier attempt reached the server, but checkpoint %q of model %s failed there: %s", cause, name, modelID, why)
			}
		case transport.IsStatus(err, http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusUnprocessableEntity):
			return "", fmt.Errorf("%w; an earlier attempt saved %q, but the server cannot list it: %v", cause, name, err)
		default:
			last = err
		}
		if err := sleep(ctx, wait); err != nil {
			msg := fmt.Sprintf("an earlier attempt reached the server, but checkpoint %q of model %s was not listed as completed by GET %s/api/v1/training_runs/%s/checkpoints in time (its save may have failed on the server)",
				name, modelID, c.URL(), modelID)
			if last != nil {
				msg += fmt.Sprintf("; last listing: %v", last)
			}
			return "", fmt.Errorf("%w; %s (%v)", cause, msg, err)
		}
		wait = min(wait*2, max(most, wait))
	}
}

// checkpointFailed returns SkyRL's reason when checkpoint name (of type
// ckType) of modelID is recorded as failed, "" otherwise (completed,
// pending, unknown, or a server without the route). SkyRL's
// validate_checkpoint answers 500 "Checkpoint creation failed: <why>" for
// a failed checkpoint on the routes that check one without using it: POST
// weights_info for a training state, GET .../checkpoints/<name>/archive
// for sampler weights (whose 302 to the download, for a completed one, is
// not followed).
func (c *Client) checkpointFailed(ctx context.Context, ckType, modelID, name string) string {
	var err error
	if ckType == "training" {
		body := map[string]string{"tinker_path": "tinker://" + modelID + "/weights/" + name}
		err = c.do(ctx, http.MethodPost, "weights_info", body, nil, transport.Call{Retry: transport.RetryUnsent})
	} else {
		err = c.do(ctx, http.MethodGet, "training_runs/"+modelID+"/checkpoints/"+name+"/archive", nil, nil,
			transport.Call{Retry: transport.RetryUnsent, NoRedirect: true})
	}
	var se *transport.StatusError
	if errors.As(err, &se) && se.Status == http.StatusInternalServerError && strings.Contains(se.Body, "Checkpoint creation failed") {
		return detail(se.Body)
	}
	return ""
}

// UnloadModel releases modelID (POST unload_model {model_id}, resolved as
// a future) and forgets its seq_ids. SkyRL frees the model's GPU state
// (on its FSDP backend the last model's release tears the runtime down, so
// that the next create_model can build one) and keeps its checkpoints; a
// model it no longer holds is answered "unloaded" as well. An unknown
// model (404 "Model not found") is already released: nil.
func (c *Client) UnloadModel(ctx context.Context, modelID string) error {
	if modelID == "" {
		return errors.New("trainer unload_model: no model id")
	}
	body := map[string]any{"model_id": modelID, "type": "unload_model"}
	reqID, err := c.submit(ctx, "unload_model", body)
	if transport.IsStatus(err, http.StatusNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := c.resolveAll(ctx, "unload_model", body, nil, reqID, nil); err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.models, modelID)
	c.mu.Unlock()
	return nil
}

// reCheckpointID is DeleteCheckpoint's id: the route's typed form.
var reCheckpointID = regexp.MustCompile(`^(weights|sampler_weights)/[A-Za-z0-9_-]+$`)

// DeleteCheckpoint deletes checkpoint id of modelID (DELETE
// training_runs/{model_id}/checkpoints/{id}, 204): id is "weights/<name>"
// (save_weights) or "sampler_weights/<name>" (save_weights_for_sampler),
// the typed form SkyRL and the hosted service require (a bare name is
// their 400). SkyRL deletes the row, then the file. A 404 naming the
// checkpoint ("Checkpoint not found") means it is gone already: nil; a 404
// that is the server's answer to a route it does not have (FastAPI's
// {"detail":"Not Found"}, or a body that is not JSON) is an error wrapping
// ErrNoDeleteRoute, never taken for a deletion. A 425 ("Checkpoint is still
// being created") is asked again after a growing wait, at most DeleteTries
// times in all. Any other failure is returned.
func (c *Client) DeleteCheckpoint(ctx context.Context, modelID, id string) error {
	if !ValidModelID(modelID) {
		return fmt.Errorf("trainer delete checkpoint: model id %q: want letters, digits, '_', '-', '.' or ':'", modelID)
	}
	if !reCheckpointID.MatchString(id) {
		return fmt.Errorf("trainer delete checkpoint %s: id %q: want weights/<name> or sampler_weights/<name>", modelID, id)
	}
	tries := c.DeleteTries
	if tries <= 0 {
		tries = DefaultDeleteTries
	}
	wait := max(c.PollWaitMin, time.Millisecond)
	most := max(c.ListWaitMax, wait)
	route := "training_runs/" + modelID + "/checkpoints/" + id
	for try := 1; ; try++ {
		err := c.do(ctx, http.MethodDelete, route, nil, nil)
		switch {
		case err == nil:
			return nil
		case transport.IsStatus(err, http.StatusNotFound):
			if routeMissing(err) {
				return fmt.Errorf("trainer delete checkpoint %s/%s: %w (%w)", modelID, id, ErrNoDeleteRoute, err)
			}
			return nil
		case !transport.IsStatus(err, http.StatusTooEarly) || try >= tries:
			if transport.IsStatus(err, http.StatusTooEarly) {
				return fmt.Errorf("trainer delete checkpoint %s/%s: still being saved after %d tries: %w", modelID, id, try, err)
			}
			return fmt.Errorf("trainer delete checkpoint %s/%s: %w", modelID, id, err)
		}
		if err := sleep(ctx, wait); err != nil {
			return fmt.Errorf("trainer delete checkpoint %s/%s: %w", modelID, id, err)
		}
		wait = min(wait*2, most)
	}
}

// ErrNoDeleteRoute is a trainer without the DELETE checkpoint route:
// SkyRL before 2026-07-16 (its #1840), which includes skyrl 0.3.0, the
// release on PyPI (seen running: docs/conformance.md). Its checkpoints
// can only be deleted on its disk.
var ErrNoDeleteRoute = errors.New("the trainer has no DELETE checkpoint route (SkyRL before 2026-07-16, e.g. skyrl 0.3.0 from PyPI)")

// routeMissing reports whether a 404 is a server's answer to a route it
// does not serve rather than to a checkpoint it does not have: FastAPI's
// {"detail":"Not Found"} for an unmounted path (SkyRL names the checkpoint:
// "Checkpoint not found"), or a body that is not JSON (a proxy's page).
func routeMissing(err error) bool {
	var se *transport.StatusError
	if !errors.As(err, &se) {
		return false
	}
	var body struct {
		Detail any `json:"detail"`
	}
	if json.Unmarshal([]byte(se.Body), &body) != nil {
		return true
	}
	d, _ := body.Detail.(string)
	return d == "Not Found"
}

// sleep waits d, or until ctx ends (then its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// reModelID is a model id as SkyRL (model_<hex>) or the hosted service
// (<uuid>:train:<n>) makes them.
var reModelID = regexp.MustCompile(`^[A-Za-z0-9_.:-]+$`)

// ValidModelID reports whether id can be a trainer model id (SkyRL's
// model_<hex>, the hosted service's <uuid>:train:<n>: letters, digits,
// '_', '.', ':' and '-', not "." or ".."), and so is safe as one segment of
// a URL path or of a file path under the checkpoints directory.
func ValidModelID(id string) bool {
	return id != "." && id != ".." && reModelID.MatchString(id)
}

// DecodeFloats returns the values of a tensor as float64s: data decoded
// from JSON ([]any of numbers) or built by this package. When the shape is
// set, the number of values must match it.
func DecodeFloats(t TensorData) ([]float64, error) {
	var out []float64
	switch d := t.Data.(type) {
	case nil:
		out = []float64{}
	case []any:
		out = make([]float64, len(d))
		for i, v := range d {
			switch x := v.(type) {
			case float64:
				out[i] = x
			case json.Number:
				f, err := x.Float64()
				if err != nil {
					return nil, fmt.Errorf("tensor value %d: %w", i, err)
				}
				out[i] = f
			default:
				return nil, fmt.Errorf("tensor value %d: %T is not a number", i, v)
			}
		}
	case []float64:
		out = append([]float64(nil), d...)
	case []float32:
		out = make([]float64, len(d))
		for i, v := range d {
			out[i] = float64(v)
		}
	case []int64:
		out = make([]float64, len(d))
		for i, v := range d {
			out[i] = float64(v)
		}
	case []int:
		out = make([]float64, len(d))
		for i, v := range d {
			out[i] = float64(v)
		}
	default:
		return nil, fmt.Errorf("tensor data of type %T", t.Data)
	}
	if len(t.Shape) > 0 {
		n := 1
		for _, s := range t.Shape {
			n *= s
		}
		if n != len(out) {
			return nil, fmt.Errorf("tensor of shape %v has %d values", t.Shape, len(out))
		}
	}
	return out, nil
}

// SaveState saves the model's full training state (weights and optimiser
// state) under name (POST save_weights) and returns its tinker:// path,
// from which LoadState resumes training exactly. A 409 "already exists"
// after an earlier attempt reached the server is recovered as
// SaveWeightsForSampler's is.
func (c *Client) SaveState(ctx context.Context, modelID, name string) (string, error) {
	if !checkpointName.MatchString(name) {
		return "", fmt.Errorf("trainer save_weights: name %q: want letters, digits, _ and - only", name)
	}
	return c.save(ctx, "save_weights", "training", modelID, name, func(seq int) any {
		return map[string]any{"model_id": modelID, "path": name, "seq_id": seq, "type": "save_weights"}
	})
}

// LoadState restores a training state saved by SaveState (POST
// load_weights with optimizer true) into the model. SkyRL permits
// load_weights only as a model's first request after create_model and
// answers any later one 400 "LoadWeights is not permitted". That answer to
// a repeat of this call (a retry, or a resubmission after a 410) means the
// first attempt landed when the model is one this client created and the
// load is its first call: no other request can be on the model then, and
// SkyRL records a load only after checking that its checkpoint exists and
// is complete. Whether that first load then failed on the server cannot be
// read (its request id was in the lost answer).
func (c *Client) LoadState(ctx context.Context, modelID, path string) error {
	if modelID == "" {
		return errors.New("trainer load_weights: no model id")
	}
	m := c.model(modelID)
	m.mu.Lock()
	first := m.created && m.last == 0
	m.last++
	body := map[string]any{"model_id": modelID, "path": path, "optimizer": true, "seq_id": m.last, "type": "load_weights"}
	reqID, err := c.submit(ctx, "load_weights", body)
	m.mu.Unlock()
	if err != nil {
		if se := loadRefused(err); first && se != nil && se.Attempts > 1 {
			c.loadLanded(modelID, path, err)
			return nil
		}
		return err
	}
	err = c.resolveAll(ctx, "load_weights", body, &m.mu, reqID, nil)
	if err != nil && first && loadRefused(err) != nil {
		c.loadLanded(modelID, path, err)
		return nil
	}
	return err
}

// loadRefused returns SkyRL's 400 "LoadWeights is not permitted" answer in
// err, if any.
func loadRefused(err error) *transport.StatusError {
	var se *transport.StatusError
	if errors.As(err, &se) && se.Status == http.StatusBadRequest && strings.Contains(se.Body, "not permitted") {
		return se
	}
	return nil
}

// loadLanded logs a load_weights taken as done after its answer was lost.
func (c *Client) loadLanded(modelID, path string, err error) {
	if c.Logger != nil {
		c.Logger.Warn("trainer load_weights answer lost: the first attempt landed", "model", modelID, "path", path, "err", err)
	}
}
