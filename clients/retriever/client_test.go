package retriever

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/internal/fake"
	"github.com/hindsearch/hindsearch/clients/transport"
)

func newTest(t *testing.T) (*fake.Server, *Client) {
	t.Helper()
	s := fake.New(t)
	o := transport.DefaultOptions("retriever", s.URL)
	o.Timeout = 2 * time.Second
	o.RetryWaitMin, o.RetryWaitMax = time.Millisecond, 2*time.Millisecond
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return s, c
}

func TestRetrieve(t *testing.T) {
	s, c := newTest(t)
	s.HandleJSON("/retrieve", 200, map[string]any{"result": []any{
		[]any{
			map[string]any{"document": map[string]any{"id": "12", "contents": "\"Paris\"\nParis is the capital of France."}, "score": 0.9},
			map[string]any{"document": map[string]any{"id": 13, "title": "Lyon", "text": "Lyon is a city."}, "score": 0.5},
		},
		[]any{},
	}})
	s.FailNext("/retrieve", 1, 503, nil, "warming up")
	got, err := c.Retrieve(context.Background(), []string{"capital of france", "nothing"}, 3)
	if err != nil {
		t.Fatal(err)
	}
	reqs := s.Requests("/retrieve")
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	for _, r := range reqs {
		fake.AssertJSON(t, r.Body, `{"queries":["capital of france","nothing"],"topk":3,"return_scores":true}`)
	}
	want := [][]Hit{
		{{ID: "12", Contents: "\"Paris\"\nParis is the capital of France.", Score: 0.9}, {ID: "13", Contents: "\"Lyon\"\nLyon is a city.", Score: 0.5}},
		{},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(got[1]) != 0 {
		t.Fatalf("got %v\nwant %v", got, want)
	}
}

func TestRetrieveErrors(t *testing.T) {
	s, c := newTest(t)
	s.HandleJSON("/retrieve", 200, map[string]any{"result": []any{[]any{}}})
	_, err := c.Retrieve(context.Background(), []string{"a", "b"}, 3)
	if err == nil || !strings.Contains(err.Error(), "1 results for 2 queries") || !strings.Contains(err.Error(), s.URL) {
		t.Fatalf("err %v", err)
	}
	s.HandleJSON("/retrieve", 200, map[string]any{"result": []any{[]any{map[string]any{"document": map[string]any{"id": "1"}, "score": 1}}}})
	_, err = c.Retrieve(context.Background(), []string{"a"}, 3)
	if err == nil || !strings.Contains(err.Error(), "without contents") {
		t.Fatalf("err %v", err)
	}
	s.HandleJSON("/retrieve", 500, map[string]any{"detail": "boom"})
	_, err = c.Retrieve(context.Background(), []string{"a"}, 3)
	if !transport.IsStatus(err, 500) || !strings.HasPrefix(err.Error(), "retriever retrieve: retriever "+s.URL+"/retrieve: status 500") {
		t.Fatalf("err %v", err)
	}
	if _, err := c.Retrieve(context.Background(), []string{"a"}, 0); err == nil {
		t.Fatal("topk 0 accepted")
	}
	n := len(s.Requests(""))
	if got, err := c.Retrieve(context.Background(), nil, 3); err != nil || len(got) != 0 || len(s.Requests("")) != n {
		t.Fatal("empty batch sent a request")
	}
}

func TestSplitContents(t *testing.T) {
	for _, tc := range []struct{ in, title, text string }{
		{"\"T\"\nline1\nline2", "\"T\"", "line1\nline2"},
		{"only title", "only title", ""},
		{"\"T\"\n", "\"T\"", ""},
		{"", "", ""},
	} {
		title, text := SplitContents(tc.in)
		if title != tc.title || text != tc.text {
			t.Errorf("%q: %q %q", tc.in, title, text)
		}
	}
}

func ExampleSplitContents() {
	title, text := SplitContents("\"Eiffel Tower\"\nThe Eiffel Tower is a wrought-iron lattice tower.\nIt is in Paris.")
	fmt.Println(title)
	fmt.Println(text)
	// Output:
	// "Eiffel Tower"
	// The Eiffel Tower is a wrought-iron lattice tower.
	// It is in Paris.
}
