// Package mlflow is a client of an MLflow tracking server's REST API
// (/api/2.0/mlflow/...): experiments, runs, batched metrics and
// parameters, and artifacts through the server's proxied artifact service
// (/api/2.0/mlflow-artifacts/...), as `mlflow server` serves them by
// default since MLflow 2. Secrets (a bearer token, or a user name and
// password) come from the caller, read from MLflow's own environment
// variables, and are never written anywhere.
package mlflow

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/hindsearch/hindsearch/clients/transport"
)

// Batch limits of runs/log-batch (MLflow's validation: at most 1000
// metrics, 100 params and 100 tags, 1000 entities in all).
const (
	MaxBatchMetrics = 1000
	MaxBatchParams  = 100
	// MaxParamValue is the longest param value MLflow keeps whole (longer
	// ones it truncates); the client cuts them itself, saying so.
	MaxParamValue = 6000
)

// Metric is one metric point.
type Metric struct {
	Key       string  `json:"key"`
	Value     float64 `json:"value"`
	Timestamp int64   `json:"timestamp"` // milliseconds since the epoch
	Step      int64   `json:"step"`
}

// Param is one run parameter (set once; MLflow refuses a changed value).
type Param struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Tag is one run tag.
type Tag struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Tracker is what a run logs to an MLflow server.
type Tracker interface {
	// Experiment returns the id of the named experiment, made if missing.
	Experiment(ctx context.Context, name string) (string, error)
	// CreateRun starts a run in experiment and returns its id.
	CreateRun(ctx context.Context, experiment, name string, startMS int64, tags []Tag) (string, error)
	// LogBatch logs metrics, params and tags, in as many calls as the
	// batch limits need.
	LogBatch(ctx context.Context, run string, metrics []Metric, params []Param, tags []Tag) error
	// UpdateRun sets a run's status (FINISHED, FAILED, KILLED, RUNNING)
	// and end time (0: none).
	UpdateRun(ctx context.Context, run, status string, endMS int64) error
	// UploadArtifact stores data as the run's artifact at path
	// (slash-separated, relative to the run's artifact root).
	UploadArtifact(ctx context.Context, experiment, run, path string, data []byte) error
	// Lookup finds the named experiment's id (found false: none).
	Lookup(ctx context.Context, name string) (id string, found bool, err error)
	// Health asks the server's /health route.
	Health(ctx context.Context) error
	// History is a run's metric points of key, in the server's order.
	History(ctx context.Context, run, key string) ([]Metric, error)
	// URL is the server's base URL.
	URL() string
}

// Client is an MLflow tracking server's client.
type Client struct {
	tc *transport.Client
}

var _ Tracker = (*Client)(nil)

// Credentials are an MLflow server's secrets: a bearer token
// (MLFLOW_TRACKING_TOKEN), or a user name and password
// (MLFLOW_TRACKING_USERNAME, MLFLOW_TRACKING_PASSWORD; MLflow's client
// prefers these when both are set, and so does this one).
type Credentials struct {
	Token, Username, Password string
}

// New builds the client of the server described by opts (opts.Role
// defaults to "mlflow") with creds.
func New(opts transport.Options, creds Credentials) (*Client, error) {
	if opts.Role == "" {
		opts.Role = "mlflow"
	}
	h := map[string]string{}
	for k, v := range opts.Headers {
		h[k] = v
	}
	switch {
	case creds.Username != "" && creds.Password != "":
		h["Authorization"] = "Basic " + base64.StdEncoding.EncodeToString([]byte(creds.Username+":"+creds.Password))
	case creds.Token != "":
		h["Authorization"] = "Bearer " + creds.Token
	}
	opts.Headers = h
	tc, err := transport.New(opts)
	if err != nil {
		return nil, err
	}
	return &Client{tc: tc}, nil
}

// URL returns the server's base URL.
func (c *Client) URL() string { return c.tc.BaseURL() }

// Close closes idle connections.
func (c *Client) Close() { c.tc.Close() }

// do is the one path of every call to the server.
func (c *Client) do(ctx context.Context, opt transport.Call, method, path string, in, out any) error {
	return c.tc.DoCall(ctx, opt, method, path, in, out)
}

// Health asks GET /health, which `mlflow server` answers "OK".
func (c *Client) Health(ctx context.Context) error {
	var body string
	if err := c.do(ctx, transport.Call{}, http.MethodGet, "/health", nil, &body); err != nil {
		return fmt.Errorf("mlflow health: %w", err)
	}
	return nil
}

// Lookup finds the named experiment (found false when the server has
// none; a deleted one is an error naming the key to change).
func (c *Client) Lookup(ctx context.Context, name string) (string, bool, error) {
	var got struct {
		Experiment struct {
			ID             string `json:"experiment_id"`
			LifecycleStage string `json:"lifecycle_stage"`
		} `json:"experiment"`
	}
	err := c.do(ctx, transport.Call{}, http.MethodGet, "/api/2.0/mlflow/experiments/get-by-name?experiment_name="+url.QueryEscape(name), nil, &got)
	switch {
	case err != nil && notFound(err):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("mlflow experiment %q: %w", name, err)
	case got.Experiment.LifecycleStage == "deleted":
		return "", false, fmt.Errorf("mlflow experiment %q is deleted on %s: restore it or name another (tracking.mlflow.experiment)", name, c.URL())
	}
	return got.Experiment.ID, true, nil
}

// Experiment returns the named experiment's id, creating it when the
// server has none of that name (a concurrent creation is looked up again).
func (c *Client) Experiment(ctx context.Context, name string) (string, error) {
	id, found, err := c.Lookup(ctx, name)
	if err != nil || found {
		return id, err
	}
	var made struct {
		ID string `json:"experiment_id"`
	}
	err = c.do(ctx, transport.Call{Retry: transport.RetryUnsent}, http.MethodPost, "/api/2.0/mlflow/experiments/create", map[string]string{"name": name}, &made)
	if err != nil {
		if code(err) == "RESOURCE_ALREADY_EXISTS" {
			id, _, err := c.Lookup(ctx, name)
			return id, err
		}
		return "", fmt.Errorf("mlflow create experiment %q: %w", name, err)
	}
	return made.ID, nil
}

// CreateRun starts a run. It is not retried once sent (a second call
// would make a second run).
func (c *Client) CreateRun(ctx context.Context, experiment, name string, startMS int64, tags []Tag) (string, error) {
	body := map[string]any{"experiment_id": experiment, "run_name": name, "start_time": startMS, "tags": nonNil(tags)}
	var got struct {
		Run struct {
			Info struct {
				RunID string `json:"run_id"`
			} `json:"info"`
		} `json:"run"`
	}
	if err := c.do(ctx, transport.Call{Retry: transport.RetryUnsent}, http.MethodPost, "/api/2.0/mlflow/runs/create", body, &got); err != nil {
		return "", fmt.Errorf("mlflow create run: %w", err)
	}
	if got.Run.Info.RunID == "" {
		return "", fmt.Errorf("mlflow create run on %s: no run_id in the answer", c.URL())
	}
	return got.Run.Info.RunID, nil
}

// LogBatch sends metrics, params and tags in batches within MLflow's
// limits. A resent batch is harmless: MLflow skips a metric point equal to
// one it holds (same key, value, timestamp and step) and a param logged
// again with the same value.
func (c *Client) LogBatch(ctx context.Context, run string, metrics []Metric, params []Param, tags []Tag) error {
	for len(metrics) > 0 || len(params) > 0 || len(tags) > 0 {
		nm := min(len(metrics), MaxBatchMetrics)
		np := min(len(params), MaxBatchParams, MaxBatchMetrics-nm)
		nt := min(len(tags), 100, MaxBatchMetrics-nm-np)
		ps := make([]Param, np)
		for i, p := range params[:np] {
			if len(p.Value) > MaxParamValue {
				p.Value = p.Value[:MaxParamValue-len("...(cut)")] + "...(cut)"
			}
			ps[i] = p
		}
		body := map[string]any{"run_id": run, "metrics": nonNil(metrics[:nm]), "params": ps, "tags": nonNil(tags[:nt])}
		if err := c.do(ctx, transport.Call{}, http.MethodPost, "/api/2.0/mlflow/runs/log-batch", body, nil); err != nil {
			return fmt.Errorf("mlflow log-batch: %w", err)
		}
		metrics, params, tags = metrics[nm:], params[np:], tags[nt:]
	}
	return nil
}

// UpdateRun sets a run's status and end time.
func (c *Client) UpdateRun(ctx context.Context, run, status string, endMS int64) error {
	body := map[string]any{"run_id": run, "status": status}
	if endMS > 0 {
		body["end_time"] = endMS
	}
	if err := c.do(ctx, transport.Call{}, http.MethodPost, "/api/2.0/mlflow/runs/update", body, nil); err != nil {
		return fmt.Errorf("mlflow update run: %w", err)
	}
	return nil
}

// UploadArtifact PUTs data to the proxied artifact service, at the run's
// artifact root mlflow-artifacts:/<experiment>/<run>/artifacts.
func (c *Client) UploadArtifact(ctx context.Context, experiment, run, path string, data []byte) error {
	var parts []string
	for _, p := range strings.Split(path, "/") {
		if p == "" || p == "." || p == ".." {
			return fmt.Errorf("mlflow artifact %q: want a relative slash-separated path", path)
		}
		parts = append(parts, url.PathEscape(p))
	}
	p := "/api/2.0/mlflow-artifacts/artifacts/" + url.PathEscape(experiment) + "/" + url.PathEscape(run) + "/artifacts/" + strings.Join(parts, "/")
	opt := transport.Call{Headers: map[string]string{"Content-Type": "application/octet-stream"}}
	if err := c.do(ctx, opt, http.MethodPut, p, json.RawMessage(data), nil); err != nil {
		return fmt.Errorf("mlflow upload %s: %w", path, err)
	}
	return nil
}

// History returns the points of a run's metric key (metrics/get-history,
// every page).
func (c *Client) History(ctx context.Context, run, key string) ([]Metric, error) {
	var out []Metric
	token := ""
	for {
		q := url.Values{"run_id": {run}, "metric_key": {key}, "max_results": {"25000"}}
		if token != "" {
			q.Set("page_token", token)
		}
		var got struct {
			Metrics []struct {
				Key       string          `json:"key"`
				Value     json.RawMessage `json:"value"`
				Timestamp json.Number     `json:"timestamp"`
				Step      json.Number     `json:"step"`
			} `json:"metrics"`
			NextPageToken string `json:"next_page_token"`
		}
		if err := c.do(ctx, transport.Call{}, http.MethodGet, "/api/2.0/mlflow/metrics/get-history?"+q.Encode(), nil, &got); err != nil {
			return nil, fmt.Errorf("mlflow metric history %q: %w", key, err)
		}
		for _, m := range got.Metrics {
			var v float64
			_ = json.Unmarshal(m.Value, &v)
			ts, _ := m.Timestamp.Int64()
			st, _ := m.Step.Int64()
			out = append(out, Metric{Key: m.Key, Value: v, Timestamp: ts, Step: st})
		}
		if got.NextPageToken == "" {
			return out, nil
		}
		token = got.NextPageToken
	}
}

// apiError is MLflow's error body.
type apiError struct {
	Code    string `json:"error_code"`
	Message string `json:"message"`
}

// code is the error_code of an MLflow error answer ("" otherwise).
func code(err error) string {
	var se *transport.StatusError
	if !errors.As(err, &se) {
		return ""
	}
	var e apiError
	if json.Unmarshal([]byte(se.Body), &e) != nil {
		return ""
	}
	return e.Code
}

// notFound reports an answer saying the resource does not exist.
func notFound(err error) bool {
	var se *transport.StatusError
	return code(err) == "RESOURCE_DOES_NOT_EXIST" || (errors.As(err, &se) && se.Status == http.StatusNotFound)
}

// nonNil is s, or an empty slice for nil (MLflow wants lists, not null).
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
