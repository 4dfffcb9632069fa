package policy

import (
	"context"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/internal/fake"
	"github.com/hindsearch/hindsearch/clients/transport"
)

// transport.Options.StdJSON (orchestrate bench's encoding/json side) sends
// the same bytes and reads the same results as the hand-written path.
func TestStdJSONSameWire(t *testing.T) {
	s := fake.New(t)
	s.Handle("/v1/completions", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		_, _ = w.Write([]byte(completionAnswer))
	})
	s.Handle("/tokenize", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		_, _ = w.Write([]byte(`{"count":3,"max_model_len":4096,"tokens":[5,6,7]}`))
	})
	clients := map[bool]*Client{}
	for _, std := range []bool{false, true} {
		o := transport.DefaultOptions("policy", s.URL)
		o.Timeout, o.StdJSON = 2*time.Second, std
		c, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		clients[std] = c
	}
	seed := int64(7)
	req := CompletionRequest{Model: "m<&>", Prompt: []int{1, 2, 3, 1 << 40}, MaxTokens: 500, Sampling: Sampling{Temperature: 0.7, TopP: 0.95, TopK: -1, RepetitionPenalty: 1},
		Seed: &seed, Stop: []string{"</search>", "\u2028"}}
	var bodies [2][2][]byte
	var comps [2]*Completion
	var ids [2][]int
	for i, std := range []bool{false, true} {
		var err error
		if comps[i], err = clients[std].Complete(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		bodies[i][0] = lastBody(t, s, "/v1/completions")
		if ids[i], err = clients[std].Tokenize(context.Background(), "m", "<information>\"x\"\n</information>", false); err != nil {
			t.Fatal(err)
		}
		bodies[i][1] = lastBody(t, s, "/tokenize")
	}
	for k, path := range []string{"/v1/completions", "/tokenize"} {
		if string(bodies[0][k]) != string(bodies[1][k]) {
			t.Errorf("%s body\nhand-written %s\nencoding/json %s", path, bodies[0][k], bodies[1][k])
		}
	}
	if !reflect.DeepEqual(comps[0], comps[1]) || !reflect.DeepEqual(ids[0], ids[1]) {
		t.Errorf("results differ: %+v %v; %+v %v", comps[0], ids[0], comps[1], ids[1])
	}
}
