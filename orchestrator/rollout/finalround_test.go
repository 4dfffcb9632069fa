package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/clients/retriever"
	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/orchestrator/dataset"
	"github.com/hindsearch/hindsearch/orchestrator/internal/testkit"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/recipes"
)

// scriptedPolicy answers each trajectory, told apart by its prompt's first
// id, with that trajectory's next scripted completion, whatever order the
// requests of concurrent trajectories come in.
type scriptedPolicy struct {
	*fakePolicy
	scripts map[int][]*policy.Completion
}

func (p *scriptedPolicy) Complete(_ context.Context, req policy.CompletionRequest) (*policy.Completion, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	req.Prompt = slices.Clone(req.Prompt)
	p.reqs = append(p.reqs, req)
	s := p.scripts[req.Prompt[0]]
	if len(s) == 0 {
		return nil, fmt.Errorf("trajectory %d: script spent", req.Prompt[0])
	}
	p.scripts[req.Prompt[0]] = s[1:]
	return s[0], nil
}

// requests are the completion requests of the trajectory whose prompt
// starts with first, in order.
func (p *scriptedPolicy) requests(first int) []policy.CompletionRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []policy.CompletionRequest
	for _, r := range p.reqs {
		if r.Prompt[0] == first {
			out = append(out, r)
		}
	}
	return out
}

// retrieveBody is a POST /retrieve body as the test server reads it.
type retrieveBody struct {
	Queries      []string `json:"queries"`
	TopK         int      `json:"topk"`
	ReturnScores bool     `json:"return_scores"`
}

// retrievalServer is a Search-R1 retrieval server on 127.0.0.1 that
// records every /retrieve body and answers each query q with one passage,
// titled "T-q".
type retrievalServer struct {
	mu     sync.Mutex
	bodies []retrieveBody
}

// start serves s until the test ends and returns a client of it.
func (s *retrievalServer) start(t *testing.T) *retriever.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b retrieveBody
		if r.Method != http.MethodPost || r.URL.Path != "/retrieve" || json.NewDecoder(r.Body).Decode(&b) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.bodies = append(s.bodies, b)
		s.mu.Unlock()
		result := make([]any, len(b.Queries))
		for i, q := range b.Queries {
			result[i] = []any{map[string]any{"document": map[string]any{"id": "d-" + q, "contents": passage(q)}, "score": 1.0}}
		}
		testkit.WriteJSON(w, http.StatusOK, map[string]any{"result": result})
	}))
	t.Cleanup(srv.Close)
	o := transport.DefaultOptions("retriever", srv.URL)
	o.Timeout, o.Retries = 5*time.Second, 0
	c, err := retriever.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// queries are the queries of every /retrieve call, one list per call.
func (s *retrievalServer) queries(t *testing.T) [][]string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out [][]string
	for _, b := range s.bodies {
		if b.TopK != 3 || !b.ReturnScores {
			t.Errorf("retrieve body %+v", b)
		}
		out = append(out, b.Queries)
	}
	return out
}

// passage is the retrieval server's one passage for q.
func passage(q string) string { return "\"T-" + q + "\"\nabout " + q }

// finalRoundRun is one rollout of two trajectories with rollout.max_turns
// 2: "searcher" (prompt [1]) searches s0, s1, s2; "answerer" (prompt [2])
// searches a0, a1 and then answers Paris.
type finalRoundRun struct {
	p                  *scriptedPolicy
	rs                 *retrievalServer
	v                  *pieceVocab
	search             [3]*policy.Completion
	asks               [2]*policy.Completion
	answer             *policy.Completion
	searcher, answerer *Trajectory
	maxTurn, maxCtx    int
}

// runFinalRound rolls out the two trajectories with final_answer_round
// final, on the async schedule (one after the other, as eval's Rollout
// calls) or the lockstep one (together), on an engine NewEngine builds.
func runFinalRound(t *testing.T, final, lockstep bool) *finalRoundRun {
	t.Helper()
	v := newPieceVocab()
	f := &finalRoundRun{v: v, rs: &retrievalServer{}, maxTurn: 500, maxCtx: 140}
	for i := range f.search {
		f.search[i] = v.completion("<think>", "look", "</think>", "<search>", fmt.Sprintf(" s%d ", i), "</search>")
	}
	for i := range f.asks {
		f.asks[i] = v.completion("<search>", fmt.Sprintf(" a%d ", i), "</search>")
	}
	f.answer = v.completion("<think>", "found", "</think>", "<answer>", " Paris ", "</answer>")
	f.p = &scriptedPolicy{fakePolicy: &fakePolicy{url: "p"}, scripts: map[int][]*policy.Completion{
		1: f.search[:], 2: {f.asks[0], f.asks[1], f.answer}}}

	rec := recipes.Defaults()
	rec.Rollout.MaxTurns, rec.Rollout.FinalAnswerRound = 2, final
	rec.Rollout.MaxTurnTokens, rec.Rollout.MaxContextTokens = f.maxTurn, f.maxCtx
	rec.Retriever.TopK, rec.Retriever.BatchWindowMS = 3, 0
	r, err := NewEngine(&rec, roles.Deps{Policies: []policy.Policy{f.p}, Retriever: f.rs.start(t), Tokenizer: v.tokenizer()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := dataset.Question{Question: "what is the capital of france", Golds: []string{"Paris"}}
	f.searcher = &Trajectory{ID: "searcher", PromptIDs: []int{1, 9}, Question: q}
	f.answerer = &Trajectory{ID: "answerer", PromptIDs: []int{2, 9}, Question: q}
	ctx := context.Background()
	if lockstep {
		ls := []*Live{NewLive(f.searcher, "base", policy.Neutral(), 1), NewLive(f.answerer, "base", policy.Neutral(), 2)}
		if err := r.Lockstep(ctx, ls, 2); err != nil {
			t.Fatal(err)
		}
	} else {
		for i, tr := range []*Trajectory{f.searcher, f.answerer} {
			if err := r.Rollout(ctx, tr, "base", policy.Neutral(), int64(i+1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.searcher.Score()
	f.answerer.Score()
	return f
}

// infoTokens are the ids the fake policy server tokenizes q's
// <information> block to: one per word.
func infoTokens(q string) []int {
	var ids []int
	for i := range strings.Fields(format.InfoBlock([]string{passage(q)})) {
		ids = append(ids, 500+i)
	}
	return ids
}

// With rollout.final_answer_round and max_turns 2, a trajectory still
// going after two rounds gets a third generation: kept as a policy turn,
// its search not sent to the retriever, no <information> block after it,
// and the trajectory ends as max_turns; one that answers in that round
// ends answered and gets its reward. On both schedules.
func TestFinalAnswerRound(t *testing.T) {
	for _, lockstep := range []bool{false, true} {
		t.Run(map[bool]string{false: "async", true: "lockstep"}[lockstep], func(t *testing.T) {
			f := runFinalRound(t, true, lockstep)

			// Two rounds of searches reach the retriever; s2 never does.
			want := [][]string{{"s0"}, {"s1"}, {"a0"}, {"a1"}}
			if lockstep {
				want = [][]string{{"s0", "a0"}, {"s1", "a1"}}
			}
			if got := f.rs.queries(t); !slices.EqualFunc(got, want, slices.Equal) {
				t.Errorf("/retrieve calls %q, want %q", got, want)
			}

			// The searcher: three generations, the last one's text and
			// tokens kept as a policy turn with nothing after them.
			s := f.searcher
			if n := len(f.p.requests(1)); n != 3 {
				t.Errorf("searcher: %d generations, want 3", n)
			}
			if s.Finish != "max_turns" || len(s.Turns) != 3 || s.Answered || s.Reward != 0 {
				t.Fatalf("searcher: finish %q, %d turns, answered %v, reward %v", s.Finish, len(s.Turns), s.Answered, s.Reward)
			}
			if tu := s.Turns[2]; tu.Text != f.search[2].Text || tu.Action != format.ActionSearch || tu.Content != "s2" || tu.Titles != nil {
				t.Errorf("final turn %+v", tu)
			}
			if tu := s.Turns[1]; !slices.Equal(tu.Titles, []string{`"T-s1"`}) {
				t.Errorf("second turn %+v", tu)
			}
			wantResp := f.search[0].Text + format.InfoBlock([]string{passage("s0")}) +
				f.search[1].Text + format.InfoBlock([]string{passage("s1")}) + f.search[2].Text
			if s.Response != wantResp {
				t.Errorf("response\n%q\nwant\n%q", s.Response, wantResp)
			}
			var wantTokens []int
			var wantPolicy []bool
			var wantLP []float64
			for i, c := range f.search {
				wantTokens = append(wantTokens, c.TokenIDs...)
				wantLP = append(wantLP, c.Logprobs...)
				for range c.TokenIDs {
					wantPolicy = append(wantPolicy, true)
				}
				if i < 2 {
					env := infoTokens(fmt.Sprintf("s%d", i))
					wantTokens = append(wantTokens, env...)
					wantLP = append(wantLP, make([]float64, len(env))...)
					wantPolicy = append(wantPolicy, make([]bool, len(env))...)
				}
			}
			if !slices.Equal(s.Tokens, wantTokens) || !slices.Equal(s.Policy, wantPolicy) || !slices.Equal(s.Logprobs, wantLP) {
				t.Errorf("tokens %v\nwant   %v\npolicy %v\nwant   %v\nlogprobs %v\nwant     %v",
					s.Tokens, wantTokens, s.Policy, wantPolicy, s.Logprobs, wantLP)
			}
			last := f.search[2].TokenIDs
			if got := s.Search[len(s.Search)-len(last):]; len(s.Search) != len(s.Tokens) || !slices.Equal(got, SearchTokenMask(f.v, last)) {
				t.Errorf("final turn's search mask %v", got)
			}

			// The final round is asked with the second round's block in
			// its context, under the turn and context caps.
			reqs := f.p.requests(1)
			if n := len(reqs); n == 3 && !slices.Equal(reqs[2].Prompt, append([]int{1, 9}, wantTokens[:len(wantTokens)-len(last)]...)) {
				t.Errorf("final round prompt %v", reqs[2].Prompt)
			}
			for i, req := range reqs {
				if want := min(f.maxTurn, f.maxCtx-len(req.Prompt)); req.MaxTokens != want {
					t.Errorf("request %d: max_tokens %d, want %d", i, req.MaxTokens, want)
				}
			}
			if n := len(reqs); n == 3 && reqs[2].MaxTokens >= f.maxTurn {
				t.Errorf("fixture: the final round's max_tokens %d is not cut by the context", reqs[2].MaxTokens)
			}

			// The answerer answers in the final round and is scored.
			a := f.answerer
			if n := len(f.p.requests(2)); n != 3 {
				t.Errorf("answerer: %d generations, want 3", n)
			}
			if a.Finish != "answer" || len(a.Turns) != 3 || !a.Answered || a.Answer != "Paris" || a.Reward != 1 || a.F1 != 1 {
				t.Errorf("answerer: finish %q, %d turns, answered %v %q, reward %v f1 %v", a.Finish, len(a.Turns), a.Answered, a.Answer, a.Reward, a.F1)
			}
			if !strings.HasSuffix(a.Response, format.InfoBlock([]string{passage("a1")})+f.answer.Text) {
				t.Errorf("answerer response %q", a.Response)
			}
		})
	}
}

// Without rollout.final_answer_round, max_turns 2 is two generations, as
// before: the second one's search is run and its block appended, the
// trajectory ends as max_turns and an answer a third round would have
// given never comes.
func TestNoFinalAnswerRound(t *testing.T) {
	for _, lockstep := range []bool{false, true} {
		t.Run(map[bool]string{false: "async", true: "lockstep"}[lockstep], func(t *testing.T) {
			f := runFinalRound(t, false, lockstep)
			want := [][]string{{"s0"}, {"s1"}, {"a0"}, {"a1"}}
			if lockstep {
				want = [][]string{{"s0", "a0"}, {"s1", "a1"}}
			}
			if got := f.rs.queries(t); !slices.EqualFunc(got, want, slices.Equal) {
				t.Errorf("/retrieve calls %q, want %q", got, want)
			}
			for i, tr := range []*Trajectory{f.searcher, f.answerer} {
				if n := len(f.p.requests(i + 1)); n != 2 {
					t.Errorf("%s: %d generations, want 2", tr.ID, n)
				}
				if tr.Finish != "max_turns" || len(tr.Turns) != 2 || tr.Answered || tr.Reward != 0 {
					t.Errorf("%s: finish %q, %d turns, answered %v, reward %v", tr.ID, tr.Finish, len(tr.Turns), tr.Answered, tr.Reward)
				}
			}
			wantResp := f.search[0].Text + format.InfoBlock([]string{passage("s0")}) +
				f.search[1].Text + format.InfoBlock([]string{passage("s1")})
			if f.searcher.Response != wantResp {
				t.Errorf("response\n%q\nwant\n%q", f.searcher.Response, wantResp)
			}
		})
	}
}
