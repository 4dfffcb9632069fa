package rollout

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/clients/retriever"
	"github.com/hindsearch/hindsearch/orchestrator/dataset"
	"github.com/hindsearch/hindsearch/orchestrator/fleet"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/recipes"
)

// pieceVocab is a local tokenizer for tests: ids below 256 are the single
// bytes, and each longer piece it is given gets the next id from 1000.
// AppendEncode gives one id per byte.
type pieceVocab struct {
	mu     sync.Mutex
	pieces map[int][]byte
	ids    map[string]int
}

func newPieceVocab() *pieceVocab {
	return &pieceVocab{pieces: map[int][]byte{}, ids: map[string]int{}}
}

// id returns the id of piece, giving it one if it has none.
func (v *pieceVocab) id(piece string) int {
	if len(piece) == 1 {
		return int(piece[0])
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if id, ok := v.ids[piece]; ok {
		return id
	}
	id := 1000 + len(v.ids)
	v.ids[piece], v.pieces[id] = id, []byte(piece)
	return id
}

func (v *pieceVocab) TokenBytes(id int) ([]byte, bool) {
	if id >= 0 && id < 256 {
		return []byte{byte(id)}, true
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	b, ok := v.pieces[id]
	return b, ok
}

func (v *pieceVocab) AppendEncode(dst []int, text string) []int {
	for i := 0; i < len(text); i++ {
		dst = append(dst, int(text[i]))
	}
	return dst
}

// tokenizer is v as the roller's local tokenizer.
func (v *pieceVocab) tokenizer() *roles.Tokenizer {
	return &roles.Tokenizer{Vocab: v, Chat: roles.Qwen25Chat, Source: "test pieces"}
}

// placeholderOffsets are the text offsets vLLM reports under
// return_tokens_as_token_ids (_create_completion_logprobs): the running sum
// of the lengths of the "token_id:N" strings it returns as tokens, from
// base; they are not positions in the text.
func placeholderOffsets(base int, ids []int) []int {
	out := make([]int, len(ids))
	off := base
	for i, id := range ids {
		out[i] = off
		off += len("token_id:" + strconv.Itoa(id))
	}
	return out
}

// completion builds a Completion from text pieces, one token per piece
// (ids from v), with vLLM's placeholder text offsets.
func (v *pieceVocab) completion(pieces ...string) *policy.Completion {
	c := &policy.Completion{Text: strings.Join(pieces, ""), FinishReason: "stop"}
	for i, p := range pieces {
		c.TokenIDs = append(c.TokenIDs, v.id(p))
		c.Logprobs = append(c.Logprobs, -float64(i+1)/10)
	}
	c.TextOffsets = placeholderOffsets(0, c.TokenIDs)
	return c
}

func TestSearchTokenMask(t *testing.T) {
	v := newPieceVocab()
	mask := func(pieces ...string) []bool { return SearchTokenMask(v, v.completion(pieces...).TokenIDs) }
	if got, want := mask("<think>", "x", "</think>", "<sea", "rch> q", " </search>", "\n"), []bool{false, false, false, true, true, true, false}; !slices.Equal(got, want) {
		t.Errorf("mask %v, want %v", got, want)
	}
	// A token straddling the start or the end of the span is in it,
	// like Qwen's ">\n\n" that ends "</search>".
	if got := mask("ok <se", "arch>q</sear", "ch>\nmore"); !slices.Equal(got, []bool{true, true, true}) {
		t.Errorf("straddling: %v", got)
	}
	if got := mask("<search>", " q ", "</", "search", ">\n\n"); !slices.Equal(got, []bool{true, true, true, true, true}) {
		t.Errorf("a last token past </search>: %v", got)
	}
	if got := mask("a ", "b ", "<search>q</search>", " c"); !slices.Equal(got, []bool{false, false, true, false}) {
		t.Errorf("one token: %v", got)
	}
	// Only the first action's span; a second search is not marked.
	if got := mask("<search>", "a", "</search>", "<search>", "b", "</search>"); !slices.Equal(got, []bool{true, true, true, false, false, false}) {
		t.Errorf("two searches: %v", got)
	}
	// A character split over two tokens: both bytes' tokens are in it.
	if got := mask("<search> Zo", "\xc3", "\xab </search>", "\n"); !slices.Equal(got, []bool{true, true, true, false}) {
		t.Errorf("split character: %v", got)
	}
	// Answers first, no action, an unclosed search: nothing.
	for _, ps := range [][]string{{"<answer>", " x ", "</answer>", "<search>q</search>"}, {"just", " text"}, {"<search>", " q"}} {
		if got := mask(ps...); slices.Contains(got, true) || len(got) != len(ps) {
			t.Errorf("%q: %v", ps, got)
		}
	}
	if got := SearchTokenMask(v, nil); len(got) != 0 {
		t.Errorf("empty turn: %v", got)
	}
	// An id the tokenizer lacks adds no bytes.
	ids := v.completion("<search>", "q", "</search>").TokenIDs
	if got := SearchTokenMask(v, []int{ids[0], 999, ids[1], ids[2], 998}); !slices.Equal(got, []bool{true, true, true, true, false}) {
		t.Errorf("unknown ids: %v", got)
	}
}

// fakePolicy is a scripted policy.Policy: Complete answers with the next
// scripted completion; Tokenize gives one id per word (500 + word index);
// TokenizeChat gives a fixed prompt; Score gives -0.5 per token.
type fakePolicy struct {
	url string
	// vocab gives the default completion's ids (nil: a vocabulary of its
	// own).
	vocab *pieceVocab

	mu        sync.Mutex
	script    []*policy.Completion
	reqs      []policy.CompletionRequest
	tokenized []string
	chats     [][]policy.Message
	err       error
}

var _ policy.Policy = (*fakePolicy)(nil)

func (p *fakePolicy) Complete(_ context.Context, req policy.CompletionRequest) (*policy.Completion, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	req.Prompt = slices.Clone(req.Prompt)
	p.reqs = append(p.reqs, req)
	if p.err != nil {
		return nil, p.err
	}
	if len(p.script) == 0 {
		if p.vocab == nil {
			p.vocab = newPieceVocab()
		}
		return p.vocab.completion("<think>", "still thinking", "</think>"), nil
	}
	c := p.script[0]
	p.script = p.script[1:]
	return c, nil
}

func (p *fakePolicy) Score(_ context.Context, _ string, seq []int) ([]float64, error) {
	out := make([]float64, len(seq))
	for i := 1; i < len(seq); i++ {
		out[i] = -0.5
	}
	return out, nil
}

func (p *fakePolicy) Tokenize(_ context.Context, _ string, text string, _ bool) ([]int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tokenized = append(p.tokenized, text)
	var ids []int
	for i := range strings.Fields(text) {
		ids = append(ids, 500+i)
	}
	return ids, nil
}

func (p *fakePolicy) TokenizeChat(_ context.Context, _ string, msgs []policy.Message, _ bool) ([]int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.chats = append(p.chats, msgs)
	return []int{1, 2, 3, 4}, nil
}

func (p *fakePolicy) LoadLoRA(context.Context, string, string) error      { return nil }
func (p *fakePolicy) UnloadLoRA(context.Context, string) error            { return nil }
func (p *fakePolicy) UpdateWeightsFromDisk(context.Context, string) error { return nil }
func (p *fakePolicy) Health(context.Context) error                        { return nil }
func (p *fakePolicy) Models(context.Context) ([]string, error)            { return nil, nil }
func (p *fakePolicy) URL() string                                         { return p.url }

// fakeRetriever returns the same hits for every query and records queries.
type fakeRetriever struct {
	mu      sync.Mutex
	hits    []retriever.Hit
	queries []string
	topks   []int
}

func (r *fakeRetriever) Retrieve(_ context.Context, qs []string, topk int) ([][]retriever.Hit, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queries = append(r.queries, qs...)
	r.topks = append(r.topks, topk)
	out := make([][]retriever.Hit, len(qs))
	for i := range qs {
		out[i] = r.hits
	}
	return out, nil
}

func (r *fakeRetriever) URL() string { return "http://retriever.invalid" }

func TestRolloutTokenInTokenOut(t *testing.T) {
	v := newPieceVocab()
	search := v.completion("<think>", "find it", "</think>", "<search>", " capital of France ", "</search>")
	invalid := v.completion("I", " am", " unsure.")
	invalid2 := v.completion("still", " unsure.")
	answer := v.completion("<answer>", " Paris ", "</answer>")
	p := &fakePolicy{url: "p", script: []*policy.Completion{search, invalid, invalid2, answer}}
	hits := []retriever.Hit{{ID: "1", Contents: "\"Paris\"\nParis is the capital of France."}, {ID: "2", Contents: "\"France\"\nA country."}}
	rt := &fakeRetriever{hits: hits}
	r := &Engine{Replicas: fleet.New([]policy.Policy{p}), retriever: rt, topk: 3, maxTurns: 4, maxTurn: 500, maxObs: 5,
		maxCtx: 4096, baseModel: "base", tok: v.tokenizer()}
	ctx := context.Background()

	prompt, err := r.PromptIDs(ctx, "what is the capital of france", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.chats[0]; len(got) != 1 || got[0].Role != "user" || got[0].Content != format.UserPrompt("what is the capital of france", "") {
		t.Errorf("chat messages %+v", got)
	}
	tr := &Trajectory{ID: "t", PromptIDs: prompt, Question: dataset.Question{Question: "what is the capital of france", Golds: []string{"Paris"}}}
	if err := r.Rollout(ctx, tr, "adapter-1", policy.Neutral(), 42); err != nil {
		t.Fatal(err)
	}

	block := format.InfoBlock([]string{hits[0].Contents, hits[1].Contents})
	env := []int{500, 501, 502, 503, 504} // the block's words, cut to maxObs
	inv := make([]int, len(strings.Fields(format.InvalidActionText)))
	for i := range inv {
		inv[i] = 500 + i
	}
	var wantTokens []int
	var wantPolicy, wantSearch []bool
	var wantLP []float64
	add := func(c *policy.Completion, searchMask []bool) {
		wantTokens = append(wantTokens, c.TokenIDs...)
		wantLP = append(wantLP, c.Logprobs...)
		for i := range c.TokenIDs {
			wantPolicy = append(wantPolicy, true)
			wantSearch = append(wantSearch, searchMask != nil && searchMask[i])
		}
	}
	addEnv := func(ids []int) {
		for _, id := range ids {
			wantTokens = append(wantTokens, id)
			wantPolicy, wantSearch, wantLP = append(wantPolicy, false), append(wantSearch, false), append(wantLP, 0)
		}
	}
	add(search, []bool{false, false, false, true, true, true})
	addEnv(env)
	add(invalid, nil)
	addEnv(inv)
	add(invalid2, nil)
	addEnv(inv)
	add(answer, nil)

	if !slices.Equal(tr.Tokens, wantTokens) || !slices.Equal(tr.Policy, wantPolicy) || !slices.Equal(tr.Search, wantSearch) || !slices.Equal(tr.Logprobs, wantLP) {
		t.Errorf("tokens   %v\nwant     %v\npolicy   %v\nwant     %v\nsearch   %v\nwant     %v\nlogprobs %v\nwant     %v",
			tr.Tokens, wantTokens, tr.Policy, wantPolicy, tr.Search, wantSearch, tr.Logprobs, wantLP)
	}
	wantResp := search.Text + block + invalid.Text + format.InvalidActionText + invalid2.Text + format.InvalidActionText + answer.Text
	if tr.Response != wantResp {
		t.Errorf("response\n%q\nwant\n%q", tr.Response, wantResp)
	}
	if tr.Finish != "answer" || tr.Model != "adapter-1" || len(tr.Turns) != 4 || tr.Searches() != 1 {
		t.Errorf("finish %q model %q turns %d searches %d", tr.Finish, tr.Model, len(tr.Turns), tr.Searches())
	}
	if tu := tr.Turns[0]; tu.Action != "search" || tu.Content != "capital of France" || !slices.Equal(tu.Titles, []string{`"Paris"`, `"France"`}) {
		t.Errorf("search turn %+v", tu)
	}
	if tu := tr.Turns[1]; tu.Action != "" || tu.Content != "" {
		t.Errorf("invalid turn %+v", tu)
	}
	if !slices.Equal(rt.queries, []string{"capital of France"}) || !slices.Equal(rt.topks, []int{3}) {
		t.Errorf("retriever got %v top-%v", rt.queries, rt.topks)
	}
	// The invalid-action text is tokenized once and cached; the block once.
	if n := slices.Index(p.tokenized, format.InvalidActionText); n < 0 || slices.Contains(p.tokenized[n+1:], format.InvalidActionText) {
		t.Errorf("tokenized %q", p.tokenized)
	}
	if !slices.Contains(p.tokenized, block) {
		t.Errorf("the information block was not tokenized as a whole: %q", p.tokenized)
	}

	// Each request carries the whole context so far, as token ids.
	ctxIDs := slices.Clone(prompt)
	turns := []*policy.Completion{search, invalid, invalid2, answer}
	envs := [][]int{env, inv, inv, nil}
	for i, req := range p.reqs {
		if !slices.Equal(req.Prompt, ctxIDs) {
			t.Errorf("turn %d prompt %v, want %v", i, req.Prompt, ctxIDs)
		}
		if req.Model != "adapter-1" || req.MaxTokens != 500 || req.Temperature != 1 || req.TopP != 1 || req.TopK != -1 ||
			!reflect.DeepEqual(req.Stop, []string{"</search>", "</answer>"}) || req.Seed == nil || *req.Seed != roles.Seed(42, int64(i)) {
			t.Errorf("turn %d request %+v", i, req)
		}
		ctxIDs = append(append(ctxIDs, turns[i].TokenIDs...), envs[i]...)
	}
	r.batch = newBatcher(rt, 3, 0, 1, false)
	r.ResetStep(ctx)

	tr.Score()
	if tr.Answer != "Paris" || !tr.Answered || tr.Reward != 1 || tr.F1 != 1 {
		t.Errorf("score: answer %q answered %v reward %v f1 %v", tr.Answer, tr.Answered, tr.Reward, tr.F1)
	}
}

func TestRolloutLimits(t *testing.T) {
	ctx := context.Background()
	// The turn limit.
	p := &fakePolicy{url: "p"}
	v := newPieceVocab()
	r := &Engine{Replicas: fleet.New([]policy.Policy{p}), retriever: &fakeRetriever{}, topk: 3, maxTurns: 2, maxTurn: 500, maxObs: 500, maxCtx: 4096, baseModel: "base",
		tok: v.tokenizer()}
	tr := &Trajectory{ID: "t", PromptIDs: []int{1, 2}}
	if err := r.Rollout(ctx, tr, "base", policy.Sampling{}, 1); err != nil {
		t.Fatal(err)
	}
	if tr.Finish != "max_turns" || len(p.reqs) != 2 || len(tr.Turns) != 2 {
		t.Errorf("finish %q after %d requests, %d turns", tr.Finish, len(p.reqs), len(tr.Turns))
	}
	tr.Score()
	// The invalid-action text's own "<answer> and </answer>" is not an answer.
	if tr.Answered || tr.Answer != "" || tr.Reward != 0 {
		t.Errorf("unanswered trajectory: answered %v, answer %q, reward %v", tr.Answered, tr.Answer, tr.Reward)
	}

	// The context budget: max_tokens shrinks to what is left, then stops.
	p = &fakePolicy{url: "p"}
	r.Replicas, r.maxTurns, r.maxCtx, r.maxTurn = fleet.New([]policy.Policy{p}), 10, 12, 500
	tr = &Trajectory{ID: "t", PromptIDs: []int{1, 2}}
	if err := r.Rollout(ctx, tr, "base", policy.Sampling{}, 1); err != nil {
		t.Fatal(err)
	}
	if tr.Finish != "context" {
		t.Errorf("finish %q, want context", tr.Finish)
	}
	for i, req := range p.reqs {
		if left := 12 - len(req.Prompt); req.MaxTokens != min(500, left) || left <= 0 {
			t.Errorf("request %d: max_tokens %d with %d prompt tokens of 12", i, req.MaxTokens, len(req.Prompt))
		}
	}

	// A completion whose tokens and logprobs disagree is an error.
	bad := v.completion("a", "b")
	bad.Logprobs = bad.Logprobs[:1]
	p = &fakePolicy{url: "http://p", script: []*policy.Completion{bad}}
	r.Replicas = fleet.New([]policy.Policy{p})
	if err := r.Rollout(ctx, &Trajectory{ID: "t9", PromptIDs: []int{1}}, "base", policy.Sampling{}, 1); err == nil ||
		!strings.Contains(err.Error(), "trajectory t9 turn 0") || !strings.Contains(err.Error(), "2 tokens and 1 logprobs") {
		t.Errorf("mismatched logprobs: %v", err)
	}
	// A policy error names the trajectory and turn.
	p = &fakePolicy{url: "p", err: errors.New("boom")}
	r.Replicas = fleet.New([]policy.Policy{p})
	if err := r.Rollout(ctx, &Trajectory{ID: "t8", PromptIDs: []int{1}}, "base", policy.Sampling{}, 1); err == nil ||
		!strings.Contains(err.Error(), "trajectory t8 turn 0: boom") {
		t.Errorf("policy error: %v", err)
	}
}

// A policy that writes megabytes, a hundred searches in one turn and a
// 100 kB query gets a bounded, well-formed trajectory: the first search
// only, its query cut before it reaches the retriever, the turn limit kept.
func TestRolloutHugeOutput(t *testing.T) {
	ctx := context.Background()
	huge := strings.Repeat("é", 50_000) // 100 kB of two-byte runes
	var many strings.Builder
	for i := 0; i < 100; i++ {
		many.WriteString("<search> q" + strconv.Itoa(i) + " </search>")
	}
	v := newPieceVocab()
	p := &fakePolicy{url: "p", vocab: v, script: []*policy.Completion{
		v.completion("<think>", strings.Repeat("x", 2<<20), "</think>", "<search> ", huge, " </search>", many.String()),
		v.completion(many.String()),
	}}
	fr := &fakeRetriever{hits: []retriever.Hit{{ID: "1", Contents: "\"T\"\ntext"}}}
	r := &Engine{Replicas: fleet.New([]policy.Policy{p}), retriever: fr, topk: 3, maxTurns: 3, maxTurn: 500, maxObs: 500, maxCtx: 1 << 20, baseModel: "base",
		tok: v.tokenizer()}
	tr := &Trajectory{ID: "t", PromptIDs: []int{1, 2}}
	if err := r.Rollout(ctx, tr, "base", policy.Sampling{}, 1); err != nil {
		t.Fatal(err)
	}
	if len(tr.Turns) != 3 || tr.Finish != "max_turns" {
		t.Fatalf("%d turns, finish %q", len(tr.Turns), tr.Finish)
	}
	if len(fr.queries) != 2 || len(fr.queries[0]) > MaxQueryBytes || !utf8.ValidString(fr.queries[0]) || fr.queries[1] != "q0" {
		t.Fatalf("queries sent: %d, first %d bytes", len(fr.queries), len(fr.queries[0]))
	}
	if tr.Turns[0].Content != strings.TrimSpace(huge) {
		t.Error("the turn lost its query text")
	}
}

// queryRetriever answers each query with its own passages and fails the
// queries it has none for.
type queryRetriever map[string][]string

func (q queryRetriever) Retrieve(_ context.Context, qs []string, _ int) ([][]retriever.Hit, error) {
	out := make([][]retriever.Hit, len(qs))
	for i, query := range qs {
		ps, ok := q[query]
		if !ok {
			return nil, errors.New("POST /retrieve: status 500")
		}
		for j, p := range ps {
			out[i] = append(out[i], retriever.Hit{ID: strconv.Itoa(j), Contents: p})
		}
	}
	return out, nil
}

func (q queryRetriever) URL() string { return "http://retriever.invalid" }

// A search turn records whether the passages the policy was shown contain
// a gold answer: only the tokens before a cut count, a failed search's
// block holds no passage, and a trajectory that never searches has no
// such turn.
func TestGoldRetrieved(t *testing.T) {
	const gold = "\"France\"\nA country whose capital is Paris, on the Seine."
	block := format.InfoBlock([]string{gold})
	// With policy.tokenize local the test vocabulary gives one id per
	// byte: max_obs_tokens cuts the block at that byte.
	paris := strings.Index(block, "Paris")
	rt := queryRetriever{"france": {gold}, "lyon": {"\"Lyon\"\nA city on the Rhone."}}
	for _, c := range []struct {
		name    string
		queries []string // one search turn each, then an answer
		golds   []string
		maxObs  int
		want    []bool // GoldRetrieved per turn
		cut     bool   // the first block was cut
	}{
		{"the whole block", []string{"france"}, []string{"Paris"}, 4096, []bool{true, false}, false},
		{"cut just after the gold", []string{"france"}, []string{"Paris"}, paris + len("Paris"), []bool{true, false}, true},
		{"cut inside the gold", []string{"france"}, []string{"Paris"}, paris + len("Par"), []bool{false, false}, true},
		{"cut before the closing tag", []string{"france"}, []string{"the Seine"}, len(block) - len("mation>\n\n"), []bool{true, false}, true},
		{"not in the passages", []string{"france"}, []string{"Lyon"}, 4096, []bool{false, false}, false},
		{"several golds, the second", []string{"france"}, []string{"Berlin", "paris"}, 4096, []bool{true, false}, false},
		{"the second search", []string{"lyon", "france"}, []string{"Paris"}, 4096, []bool{false, true, false}, false},
		{"no search", nil, []string{"Paris"}, 4096, []bool{false}, false},
		// The failed search's block says "no passages": not a gold "no".
		{"a failed search", []string{"nowhere"}, []string{"no", "passages"}, 4096, []bool{false, false}, false},
	} {
		v := newPieceVocab()
		var script []*policy.Completion
		for _, q := range c.queries {
			script = append(script, v.completion("<search>", " "+q+" ", "</search>"))
		}
		script = append(script, v.completion("<answer>", " Paris ", "</answer>"))
		p := &fakePolicy{url: "p", script: script}
		r := &Engine{Replicas: fleet.New([]policy.Policy{p}), retriever: rt, topk: 3, maxTurns: 4, maxTurn: 500, maxObs: c.maxObs,
			maxCtx: 1 << 20, baseModel: "base", tok: v.tokenizer(), local: true, observeErrors: true}
		tr := &Trajectory{ID: "t", PromptIDs: []int{1, 2}, Question: dataset.Question{Question: "capital of france", Golds: c.golds}}
		if err := r.Rollout(context.Background(), tr, "base", policy.Neutral(), 1); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var got []bool
		for _, tu := range tr.Turns {
			got = append(got, tu.GoldRetrieved)
		}
		if !slices.Equal(got, c.want) || tr.Turns[0].ObsCut != c.cut {
			t.Errorf("%s: gold retrieved %v, want %v; cut %v, want %v", c.name, got, c.want, tr.Turns[0].ObsCut, c.cut)
		}
		if c.name == "a failed search" && tr.Turns[0].RetrievalError == "" {
			t.Errorf("%s: the search did not fail: the case tests nothing", c.name)
		}
	}
}

func TestPinKeyGroups(t *testing.T) {
	reps := fleet.New(nil)
	for _, c := range []struct{ id, group string }{
		{"s0001-g000003-k2", "s0001-g000003"}, {"eval-nq-5", "eval-nq-5"}, {"eval-x-kilt-5", "eval-x-kilt-5"}, {"b3-k", "b3-k"},
	} {
		tr := &Trajectory{ID: c.id}
		reps.Affinity = recipes.AffinityGroup
		if got := tr.PinKey(reps); got != c.group {
			t.Errorf("group key of %s = %q, want %q", c.id, got, c.group)
		}
		reps.Affinity = recipes.AffinityTrajectory
		if got := tr.PinKey(reps); got != c.id {
			t.Errorf("trajectory key of %s = %q", c.id, got)
		}
	}
}
