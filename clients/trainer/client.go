package trainer

import (
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
)

// Client is the Trainer of one Tinker API server (SkyRL tx or the hosted
// service), in JSON.
//
// Each model's calls (forward_backward, optim_step,
// save_weights_for_sampler) carry a seq_id that starts at 1 and grows by one
// per call; the model's mutex is held from the choice of the seq_id until
// the server accepted the POST, so seq_ids arrive in order. A POST retried
// by the transport, or re-submitted after its future expired (410), carries
// the same seq_id and body. A POST that failed outright still uses up its
// seq_id, so that a later call never reuses it with another body.
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
	// Logger, when set, receives failed heartbeats.
	Logger *slog.Logger

	mu       sync.Mutex
	models   map[string]*modelState
	sessions map[string]int // next model_seq_id
}

type modelState struct {
	mu   sync.Mutex
	last int // last seq_id used
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
		models:            map[string]*modelState{},
		sessions:          map[string]int{},
	}, nil
}

// URL returns the server's base URL.
func (c *Client) URL() string { return c.tc.BaseURL() }

// Close closes idle connections. It does not stop sessions: close them.
func (c *Client) Close() { c.tc.Close() }

// do is the one path of every call to the server; route is relative to
// /api/v1/.
func (c *Client) do(ctx context.Context, method, route string, in, out any) error {
	return c.tc.Do(ctx, method, "/api/v1/"+route, in, out)
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

// CreateModel creates a LoRA model of baseModel with the given rank in
// session s (POST create_model, resolved as a future) and returns its id.
func (c *Client) CreateModel(ctx context.Context, s *Session, baseModel string, rank int) (string, error) {
	if s == nil || s.ID == "" {
		return "", errors.New("trainer create model: no session")
	}
	if baseModel == "" || rank <= 0 {
		return "", fmt.Errorf("trainer create model: base model %q rank %d: want a model and rank > 0", baseModel, rank)
	}
	c.mu.Lock()
	seq := c.sessions[s.ID]
	c.sessions[s.ID] = seq + 1
	c.mu.Unlock()
	body := map[string]any{
		"session_id":   s.ID,
		"model_seq_id": seq,
		"base_model":   baseModel,
		"lora_config":  map[string]int{"rank": rank},
		"type":         "create_model",
	}
	var res struct {
		ModelID string `json:"model_id"`
	}
	if err := c.call(ctx, "create_model", body, nil, &res); err != nil {
		return "", err
	}
	if res.ModelID == "" {
		return "", fmt.Errorf("trainer create_model %s: no model_id in result", c.URL())
	}
	c.model(res.ModelID)
	return res.ModelID, nil
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
	body := build(m.last)
	reqID, err := c.submit(ctx, op, body)
	m.mu.Unlock()
	if err != nil {
		return err
	}
	return c.resolveAll(ctx, op, body, &m.mu, reqID, out)
}

// call submits an unordered call (create_model) and resolves it into out.
func (c *Client) call(ctx context.Context, op string, body any, lock *sync.Mutex, out any) error {
	reqID, err := c.submit(ctx, op, body)
	if err != nil {
		return err
	}
	return c.resolveAll(ctx, op, body, lock, reqID, out)
}

// submit POSTs body to route op and returns the future's request id.
func (c *Client) submit(ctx context.Context, op string, body any) (string, error) {
	var f struct {
		RequestID string `json:"request_id"`
	}
	if err := c.do(ctx, http.MethodPost, op, body, &f); err != nil {
		return "", fmt.Errorf("trainer %s: %w", op, err)
	}
	if f.RequestID == "" {
		return "", fmt.Errorf("trainer %s %s: no request_id in response", op, c.URL())
	}
	return f.RequestID, nil
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
	wait := max(c.PollWaitMin, time.Millisecond)
	body := map[string]string{"request_id": reqID}
	for {
		var raw json.RawMessage
		err := c.do(ctx, http.MethodPost, "retrieve_future", body, &raw)
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
		var probe struct {
			Type     string          `json:"type"`
			Error    json.RawMessage `json:"error"`
			Category string          `json:"category"`
		}
		_ = json.Unmarshal(raw, &probe) // a result need not be an object
		if probe.Type == "try_again" {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, fmt.Errorf("trainer %s: request %s: %w", op, reqID, ctx.Err())
			case <-t.C:
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
// name must match ^[A-Za-z0-9_-]+$.
func (c *Client) SaveWeightsForSampler(ctx context.Context, modelID, name string) (string, error) {
	if !checkpointName.MatchString(name) {
		return "", fmt.Errorf("trainer save_weights_for_sampler: name %q: want letters, digits, _ and - only", name)
	}
	var res struct {
		Path string `json:"path"`
	}
	err := c.modelCall(ctx, "save_weights_for_sampler", modelID, func(seq int) any {
		return map[string]any{"model_id": modelID, "path": name, "seq_id": seq}
	}, &res)
	if err != nil {
		return "", err
	}
	if res.Path == "" {
		return "", fmt.Errorf("trainer save_weights_for_sampler %s: no path in result", c.URL())
	}
	return res.Path, nil
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
// from which LoadState resumes training exactly.
func (c *Client) SaveState(ctx context.Context, modelID, name string) (string, error) {
	if !checkpointName.MatchString(name) {
		return "", fmt.Errorf("trainer save_weights: name %q: want letters, digits, _ and - only", name)
	}
	var res struct {
		Path string `json:"path"`
	}
	err := c.modelCall(ctx, "save_weights", modelID, func(seq int) any {
		return map[string]any{"model_id": modelID, "path": name, "seq_id": seq, "type": "save_weights"}
	}, &res)
	if err != nil {
		return "", err
	}
	if res.Path == "" {
		return "", fmt.Errorf("trainer save_weights %s: no path in result", c.URL())
	}
	return res.Path, nil
}

// LoadState restores a training state saved by SaveState (POST
// load_weights with optimizer true) into the model.
func (c *Client) LoadState(ctx context.Context, modelID, path string) error {
	return c.modelCall(ctx, "load_weights", modelID, func(seq int) any {
		return map[string]any{"model_id": modelID, "path": path, "optimizer": true, "seq_id": seq, "type": "load_weights"}
	}, nil)
}
