package trainer

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/transport"
)

// Any answer to a training call or its future gives a result or an error,
// never a panic or a hang.
func FuzzTrainingAnswers(f *testing.F) {
	f.Add([]byte(`{"request_id":"r1"}`), []byte(`{"loss_fn_outputs":[],"metrics":{"loss:sum":1}}`))
	f.Add([]byte(`{"request_id":"r1"}`), []byte(`{"error":"boom","category":"user"}`))
	f.Add([]byte(`{}`), []byte(`{"type":"try_again"}`))
	var post, future []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/retrieve_future" {
			_, _ = w.Write(future)
			return
		}
		_, _ = w.Write(post)
	}))
	defer srv.Close()
	o := transport.DefaultOptions("trainer", srv.URL)
	o.Retries = 0
	f.Fuzz(func(t *testing.T, p, fu []byte) {
		post, future = p, fu
		c, err := New(o, "")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		d := Datum{ModelInput: ModelInput{Chunks: []Chunk{{Type: "encoded_text", Tokens: []int{1, 2}}}},
			LossFnInputs: map[string]TensorData{"target_tokens": Int64Tensor([]int64{2, 3}), "weights": Float32Tensor([]float32{1, 1}),
				"logprobs": Float32Tensor([]float32{0, 0}), "advantages": Float32Tensor([]float32{1, 1})}}
		_, _ = c.ForwardBackward(ctx, "m", []Datum{d}, "importance_sampling", nil)
		_, _ = c.Capabilities(ctx)
	})
}
