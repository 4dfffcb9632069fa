package policy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/transport"
)

// A trajectory's completion requests each carry the whole context so far
// as token ids: the sampled ids are appended for the next turn.
func ExampleClient_Complete() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct{ Prompt []int }
		_ = json.Unmarshal(body, &req)
		fmt.Println("server got prompt", req.Prompt)
		_, _ = io.WriteString(w, `{"choices":[{"text":" x","finish_reason":"length","stop_reason":null,`+
			`"logprobs":{"tokens":["token_id:7"],"token_logprobs":[-0.5],"text_offset":[0]}}]}`)
	}))
	defer srv.Close()
	c, err := policy.New(transport.DefaultOptions("policy", srv.URL))
	if err != nil {
		panic(err)
	}
	defer c.Close()

	ids := []int{1, 2, 3}
	for range 2 {
		out, err := c.Complete(context.Background(), policy.CompletionRequest{Model: "m", Prompt: ids,
			MaxTokens: 1, Sampling: policy.Neutral()})
		if err != nil {
			panic(err)
		}
		ids = append(ids, out.TokenIDs...)
	}
	// Output:
	// server got prompt [1 2 3]
	// server got prompt [1 2 3 7]
}
