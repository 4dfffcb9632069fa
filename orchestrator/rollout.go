package orchestrator

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/retriever"
	"github.com/hindsearch/hindsearch/orchestrator/format"
)

// Turn records one policy turn of a trajectory, for inspection.
type Turn struct {
	// Text is the policy's text for the turn.
	Text string `json:"text"`
	// Action is search, answer or "" (invalid).
	Action string `json:"action"`
	// Content is the query or the answer.
	Content string `json:"content,omitempty"`
	// Titles are the titles of the passages retrieved for a search.
	Titles []string `json:"titles,omitempty"`
	// Finish is the policy's finish reason.
	Finish string `json:"finish"`
}

// Trajectory is one rollout: the prompt, every response token with its loss
// mask and sampling logprob, and what was made of it.
type Trajectory struct {
	ID       string   `json:"id"`
	Step     int      `json:"step"`
	Group    int      `json:"group"`
	Sample   int      `json:"sample"`
	Question Question `json:"question"`
	// Model is the policy model name that sampled it.
	Model string `json:"model"`
	// PromptIDs are the chat-templated prompt's token ids.
	PromptIDs []int `json:"prompt_ids"`
	// Tokens are the response token ids: policy tokens exactly as sampled,
	// environment tokens as tokenized by the policy server.
	Tokens []int `json:"tokens"`
	// Policy[i] is true for tokens the policy sampled (loss mask 1).
	Policy []bool `json:"policy"`
	// Search[i] is true for policy tokens inside a <search>...</search>.
	Search []bool `json:"search"`
	// Logprobs are the sampling logprobs (0 for environment tokens).
	Logprobs []float64 `json:"logprobs"`
	Turns    []Turn    `json:"turns"`
	// Response is the response text (policy and environment).
	Response string `json:"response"`
	Answer   string `json:"answer"`
	Answered bool   `json:"answered"`
	// Finish says how the trajectory ended: answer, max_turns, context.
	Finish string  `json:"finish"`
	Reward float64 `json:"reward"`
	F1     float64 `json:"f1"`
	// Advantage is the group advantage broadcast to every policy token.
	Advantage float64 `json:"advantage"`
	// Critique is the judge's critique (failed trajectories only).
	Critique string `json:"critique,omitempty"`
	// CritiqueError says why no critique was used.
	CritiqueError string `json:"critique_error,omitempty"`
	// OPD is the per-token on-policy-distillation term (nil without one).
	OPD []float64 `json:"opd,omitempty"`
}

// Searches counts the trajectory's search turns.
func (t *Trajectory) Searches() int {
	n := 0
	for _, tr := range t.Turns {
		if tr.Action == format.ActionSearch {
			n++
		}
	}
	return n
}

// replicas balances policy requests across replicas by least outstanding
// requests (ties go round-robin).
type replicas struct {
	ps          []policy.Policy
	outstanding []atomic.Int64
	next        atomic.Uint64
}

func newReplicas(ps []policy.Policy) *replicas {
	return &replicas{ps: ps, outstanding: make([]atomic.Int64, len(ps))}
}

// acquire picks a replica and counts a request on it; call release after.
func (r *replicas) acquire() (int, policy.Policy) {
	start := int(r.next.Add(1) % uint64(len(r.ps)))
	best := start
	for k := 1; k < len(r.ps); k++ {
		i := (start + k) % len(r.ps)
		if r.outstanding[i].Load() < r.outstanding[best].Load() {
			best = i
		}
	}
	r.outstanding[best].Add(1)
	return best, r.ps[best]
}

func (r *replicas) release(i int) { r.outstanding[i].Add(-1) }

// sampling are the sampling settings of a rollout.
type sampling struct {
	temperature, topP float64
	topK              int
}

// roller produces trajectories against the policy replicas and retriever.
type roller struct {
	reps      *replicas
	retriever retriever.Retriever
	topk      int
	maxTurns  int
	maxTurn   int
	maxObs    int
	maxCtx    int
	baseModel string
	phases    *phaseClock

	mu      sync.Mutex
	invalid []int // tokens of the invalid-action text, cached
}

// seedFor derives a per-request seed from its coordinates.
func seedFor(parts ...int64) int64 {
	h := fnv.New64a()
	for _, p := range parts {
		var b [8]byte
		for i := range b {
			b[i] = byte(p >> (8 * i))
		}
		h.Write(b[:])
	}
	return int64(h.Sum64() & 0x7fffffff)
}

func (r *roller) tokenize(ctx context.Context, text string) ([]int, error) {
	i, p := r.reps.acquire()
	defer r.reps.release(i)
	ids, err := p.Tokenize(ctx, r.baseModel, text, false)
	if err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	return ids, nil
}

func (r *roller) invalidTokens(ctx context.Context) ([]int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.invalid != nil {
		return r.invalid, nil
	}
	ids, err := r.tokenize(ctx, format.InvalidActionText)
	if err != nil {
		return nil, err
	}
	r.invalid = ids
	return ids, nil
}

// promptIDs applies the chat template to the Search-R1 prompt (with an
// optional hint) through the policy server.
func (r *roller) promptIDs(ctx context.Context, question, hint string) ([]int, error) {
	i, p := r.reps.acquire()
	defer r.reps.release(i)
	msgs := []policy.Message{{Role: "user", Content: format.UserPrompt(question, hint)}}
	ids, err := p.TokenizeChat(ctx, r.baseModel, msgs, true)
	if err != nil {
		return nil, fmt.Errorf("tokenize prompt: %w", err)
	}
	return ids, nil
}

// rollout runs one trajectory to its end. seed identifies the request
// stream; model is the policy model name to sample from.
func (r *roller) rollout(ctx context.Context, t *Trajectory, model string, sp sampling, seed int64) error {
	t.Model = model
	ctxIDs := append([]int(nil), t.PromptIDs...)
	var resp []byte
	for turn := 0; turn < r.maxTurns; turn++ {
		budget := r.maxCtx - len(ctxIDs)
		if budget <= 0 {
			t.Finish = "context"
			break
		}
		maxTok := min(r.maxTurn, budget)
		req := policy.CompletionRequest{Model: model, Prompt: ctxIDs, MaxTokens: maxTok,
			Temperature: sp.temperature, TopP: sp.topP, TopK: sp.topK, Stop: format.StopStrings}
		s := seedFor(seed, int64(turn))
		req.Seed = &s
		i, p := r.reps.acquire()
		done := r.phases.start("rollout_policy")
		c, err := p.Complete(ctx, req)
		done()
		r.reps.release(i)
		if err != nil {
			return fmt.Errorf("trajectory %s turn %d: %w", t.ID, turn, err)
		}
		if len(c.TokenIDs) != len(c.Logprobs) {
			return fmt.Errorf("trajectory %s turn %d: %s returned %d tokens and %d logprobs", t.ID, turn, p.URL(), len(c.TokenIDs), len(c.Logprobs))
		}
		kind, content, aStart, aEnd := format.ActionSpan(c.Text)
		inSearch := searchTokenMask(c, kind, aStart, aEnd)
		for j, id := range c.TokenIDs {
			t.Tokens = append(t.Tokens, id)
			t.Policy = append(t.Policy, true)
			t.Search = append(t.Search, inSearch[j])
			t.Logprobs = append(t.Logprobs, c.Logprobs[j])
		}
		ctxIDs = append(ctxIDs, c.TokenIDs...)
		resp = append(resp, c.Text...)
		tr := Turn{Text: c.Text, Action: kind, Content: content, Finish: c.FinishReason}
		var env []int
		switch kind {
		case format.ActionAnswer:
			t.Turns = append(t.Turns, tr)
			t.Finish = "answer"
			t.Response = string(resp)
			return nil
		case format.ActionSearch:
			done := r.phases.start("rollout_retrieve")
			hits, err := r.retriever.Retrieve(ctx, []string{content}, r.topk)
			done()
			if err != nil {
				return fmt.Errorf("trajectory %s turn %d: retrieve: %w", t.ID, turn, err)
			}
			var contents []string
			if len(hits) > 0 {
				for _, h := range hits[0] {
					contents = append(contents, h.Contents)
					title, _ := retriever.SplitContents(h.Contents)
					tr.Titles = append(tr.Titles, title)
				}
			}
			block := format.InfoBlock(contents)
			env, err = r.tokenize(ctx, block)
			if err != nil {
				return fmt.Errorf("trajectory %s turn %d: %w", t.ID, turn, err)
			}
			if len(env) > r.maxObs {
				env = env[:r.maxObs]
			}
			resp = append(resp, block...)
		default:
			env, err = r.invalidTokens(ctx)
			if err != nil {
				return fmt.Errorf("trajectory %s turn %d: %w", t.ID, turn, err)
			}
			resp = append(resp, format.InvalidActionText...)
		}
		t.Turns = append(t.Turns, tr)
		for _, id := range env {
			t.Tokens = append(t.Tokens, id)
			t.Policy = append(t.Policy, false)
			t.Search = append(t.Search, false)
			t.Logprobs = append(t.Logprobs, 0)
		}
		ctxIDs = append(ctxIDs, env...)
	}
	if t.Finish == "" {
		t.Finish = "max_turns"
	}
	t.Response = string(resp)
	return nil
}

// searchTokenMask marks the tokens of a completion that overlap the
// <search>...</search> span [start, end) of its text, using the server's
// text offsets.
func searchTokenMask(c *policy.Completion, kind string, start, end int) []bool {
	mask := make([]bool, len(c.TokenIDs))
	if kind != format.ActionSearch || len(c.TextOffsets) != len(c.TokenIDs) || len(c.TokenIDs) == 0 {
		return mask
	}
	base := c.TextOffsets[0] // some servers count offsets from the prompt
	for j := range c.TokenIDs {
		from := c.TextOffsets[j] - base
		to := len(c.Text)
		if j+1 < len(c.TokenIDs) {
			to = c.TextOffsets[j+1] - base
		}
		if to > start && from < end {
			mask[j] = true
		}
	}
	return mask
}

// score sets the trajectory's reward (exact match) and F1 from its last
// answer. Only the policy's own text is searched: the invalid-action text
// the environment appends holds an "<answer> and </answer>" of its own.
func (t *Trajectory) score() {
	var own strings.Builder
	for _, tr := range t.Turns {
		own.WriteString(tr.Text)
	}
	t.Answer, t.Answered = format.ExtractAnswer(own.String())
	if !t.Answered {
		t.Reward, t.F1 = 0, 0
		return
	}
	t.Reward = format.ExactMatch(t.Answer, t.Question.Golds)
	t.F1 = format.F1(t.Answer, t.Question.Golds)
}
