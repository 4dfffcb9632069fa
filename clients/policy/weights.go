package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hindsearch/hindsearch/clients/transport"
)

// ErrWeightsFromDiskUnsupported is wrapped by UpdateWeightsFromDisk errors
// when the server has no /update_weights_from_disk route (stock vLLM has
// none: sync.kind sglang_disk needs SGLang).
var ErrWeightsFromDiskUnsupported = errors.New("the server has no POST /update_weights_from_disk route (stock vLLM has none): sync.kind sglang_disk needs SGLang, or use sync.kind lora")

// weightsFromDiskBody is the request body of /update_weights_from_disk
// (SGLang's UpdateWeightFromDiskReqInput). Every field whose default would
// decide what the server does is sent: load_format "auto" (safetensors,
// falling back to .bin files, whatever --load-format the server was
// started with) and abort_all_requests false (requests in flight finish
// first; there are none at a sync point). Fields of newer SGLang versions
// (weight_version, flush_cache, ...) are not sent: older versions lack
// them, and their defaults are what older versions always do.
type weightsFromDiskBody struct {
	ModelPath        string `json:"model_path"`
	LoadFormat       string `json:"load_format"`
	AbortAllRequests bool   `json:"abort_all_requests"`
}

// weightsFromDiskAnswer is SGLang's answer, with 200 on success and 400 on
// failure.
type weightsFromDiskAnswer struct {
	Success           *bool  `json:"success"`
	Message           string `json:"message"`
	NumPausedRequests int    `json:"num_paused_requests"`
}

// UpdateWeightsFromDisk loads the full model at path in place of the served
// weights (POST /update_weights_from_disk {"model_path": path,
// "load_format": "auto", "abort_all_requests": false}). The
// server's {"success": false, "message": ...} (status 400, or 200 from a
// lenient server) is an error carrying the message.
func (c *Client) UpdateWeightsFromDisk(ctx context.Context, path string) error {
	return UpdateWeightsFromDiskWith(ctx, c.do, c.URL(), path)
}

// Doer is one policy client's call path: it sends a request to path
// (relative to the server's base URL) and decodes a 2xx answer into out, a
// non-2xx one becoming a *transport.StatusError.
type Doer func(ctx context.Context, method, path string, in, out any) error

// UpdateWeightsFromDiskWith is Client.UpdateWeightsFromDisk made through
// another client's call path, for every policy client of a server with
// SGLang's /update_weights_from_disk (clients/policy/sglang); url names the
// server in errors.
func UpdateWeightsFromDiskWith(ctx context.Context, do Doer, url, path string) error {
	var ans weightsFromDiskAnswer
	err := do(ctx, http.MethodPost, "/update_weights_from_disk", weightsFromDiskBody{ModelPath: path, LoadFormat: "auto", AbortAllRequests: false}, &ans)
	if err != nil {
		if routeMissing(err) {
			return fmt.Errorf("policy update weights from disk at %s: %w", url, ErrWeightsFromDiskUnsupported)
		}
		var se *transport.StatusError
		if errors.As(err, &se) && se.Status == http.StatusBadRequest {
			// The refusal's message says why (a missing file, a shape
			// mismatch); the body may be cut short, then it is shown as is.
			var a weightsFromDiskAnswer
			msg := strings.TrimSpace(se.Body)
			if json.Unmarshal([]byte(se.Body), &a) == nil && a.Message != "" {
				msg = a.Message
			}
			return fmt.Errorf("policy update weights from disk %s at %s: refused (status 400): %s", path, url, msg)
		}
		return fmt.Errorf("policy update weights from disk %s: %w", path, err)
	}
	switch {
	case ans.Success == nil:
		return fmt.Errorf("policy update weights from disk %s at %s: the answer has no success field", path, url)
	case !*ans.Success:
		return fmt.Errorf("policy update weights from disk %s at %s: refused: %s", path, url, ans.Message)
	}
	return nil
}
