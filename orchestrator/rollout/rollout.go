package rollout

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sourcegraph/conc/pool"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/clients/retriever"
	"github.com/hindsearch/hindsearch/orchestrator/dataset"
	"github.com/hindsearch/hindsearch/orchestrator/fleet"
	"github.com/hindsearch/hindsearch/orchestrator/metrics"
	"github.com/hindsearch/hindsearch/orchestrator/progress"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/recipes"
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
	// From and To bound the turn's policy tokens in the trajectory's
	// Tokens: [From, To).
	From int `json:"from"`
	To   int `json:"to"`
	// ThinkTokens counts the turn's tokens inside its first
	// <think>...</think> (to the turn's end when it never closes), tags
	// included, located in the sampled ids' bytes (ThinkTokenCount).
	ThinkTokens int `json:"think_tokens,omitempty"`
	// Repeated says the turn's search repeats an earlier search of the
	// same trajectory (the same words, case and spacing aside).
	Repeated bool `json:"repeated,omitempty"`
	// Cut says the turn was stopped at its token cap: CutTurnTokens
	// (rollout.max_turn_tokens) or CutContext (the context budget).
	Cut string `json:"cut,omitempty"`
	// ObsCut says the <information> block after the turn was cut at
	// rollout.max_obs_tokens.
	ObsCut bool `json:"obs_cut,omitempty"`
	// RetrievalError is why the turn's search got no passages (the
	// retriever failed after retries, retriever.on_error observe); the
	// trajectory was shown format.SearchFailedBlock instead.
	RetrievalError string `json:"retrieval_error,omitempty"`
	// GoldRetrieved says the passages retrieved for the turn's search, as
	// far as the policy was shown them (format.InfoText of the
	// <information> block, only its tokens before the cut when ObsCut),
	// contain a gold answer of the question (format.ContainsAnswer). A
	// failed search's block holds no passage and never counts.
	GoldRetrieved bool `json:"gold_retrieved,omitempty"`
}

// Turn.Cut values.
const (
	// CutTurnTokens: the turn reached rollout.max_turn_tokens.
	CutTurnTokens = "turn_tokens"
	// CutContext: the turn reached the context budget
	// (rollout.max_context_tokens less the context so far).
	CutContext = "context"
)

// Trajectory is one rollout: the prompt, every response token with its loss
// mask and sampling logprob, and what was made of it.
type Trajectory struct {
	ID       string           `json:"id"`
	Step     int              `json:"step"`
	Group    int              `json:"group"`
	Sample   int              `json:"sample"`
	Question dataset.Question `json:"question"`
	// Model is the policy model name that sampled it.
	Model string `json:"model"`
	// PromptIDs are the chat-templated prompt's token ids.
	PromptIDs []int `json:"prompt_ids"`
	// Tokens are the response token ids: policy tokens exactly as sampled,
	// environment tokens as tokenized by the policy server (or in this
	// process with policy.tokenize local).
	Tokens []int `json:"tokens"`
	// Policy[i] is true for tokens the policy sampled (loss mask 1).
	Policy []bool `json:"policy"`
	// Search[i] is true for policy tokens whose bytes overlap their turn's
	// first <search>...</search> (see SearchTokenMask).
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
	// HintFrom is "siblings" when Critique is the judge-free siblings hint
	// (hindsight.hint siblings), empty for a judge's critique.
	HintFrom string `json:"hint_from,omitempty"`
	// FirstWrongSearch is the search (1-based) the critique's first line
	// names as the first that went wrong, under hindsight.broadcast
	// earliest (0: none named).
	FirstWrongSearch int `json:"first_wrong_search,omitempty"`
	// CritiqueError says why no critique was used.
	CritiqueError string `json:"critique_error,omitempty"`
	// OPD is the per-token on-policy-distillation term (nil without one).
	OPD []float64 `json:"opd,omitempty"`
	// StudentRescored says the OPD term's student logprobs are the
	// prefill route's, from an extra scoring call in the student's own
	// context (hindsight.student_logprobs rescored), not the sampling ones.
	StudentRescored bool `json:"student_rescored,omitempty"`
	// Pieces are the tokens' texts, the exact bytes of each policy token's
	// id under the local tokenizer ("" for environment tokens; a character
	// split over tokens is on the token that completes it, see
	// TokenPieces); filled only in the trajectories kept for inspection
	// (orchestrate show).
	Pieces []string `json:"pieces,omitempty"`
	// done is when the rollout ended (for throughput measurements).
	done time.Time
}

// Ended is when the trajectory's rollout ended (zero before).
func (t *Trajectory) Ended() time.Time { return t.done }

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

// Engine rolls out trajectories against the policy replicas and the
// retriever: Search-R1's turns (think, search or answer; the retrieved
// passages as an <information> block), token ids in and out, each policy
// token's sampling logprob and whether it is part of its turn's search.
// A trajectory has up to maxTurns turns whose searches are run, then, with
// finalRound (rollout.final_answer_round), if still going, one more turn
// after which nothing is run or appended (Search-R1's do_search=False
// round). The exported fields may be set between steps, never during one.
type Engine struct {
	// Replicas are the policy replicas sampled from (an evaluation's
	// engine shares the training engine's, one view of their health).
	Replicas  *fleet.Replicas
	retriever retriever.Retriever
	topk      int
	maxTurns  int
	maxTurn   int
	maxObs    int
	maxCtx    int
	baseModel string
	// Phases, when set, times the engine's phases (rollout_policy: policy
	// turns; rollout_retrieve: retriever calls).
	Phases *metrics.Phases
	// Exclusive, when set, is read-held by every policy turn while its
	// request is in flight: whoever write-holds it has the replicas to
	// itself (hindsight.score_alone).
	Exclusive *sync.RWMutex
	// observeErrors makes a search the retriever failed (after retries)
	// an observation of the trajectory instead of an error of the
	// rollout (retriever.on_error observe).
	observeErrors bool
	// batch coalesces and caches the searches of the async schedule (nil:
	// one call per search).
	batch    *batcher
	maxBatch int

	// finalRound gives a trajectory still going after maxTurns turns one
	// final turn: kept as a policy turn, its search not run, no
	// environment text after it.
	finalRound bool

	mu       sync.Mutex
	tokCache map[string][]int // environment texts tokenized this step

	// Metrics, when set, counts the trajectories in flight; Progress, when
	// set, is told of each finished trajectory.
	Metrics  *metrics.Metrics
	Progress *progress.Task
	// Sampled, when set, records which replica sampled with which weights
	// (a training step's rollouts).
	Sampled *fleet.SampledBy
	// tok is the local tokenizer: the search span is located by the
	// sampled ids' bytes under it; with local set, environment text and
	// prompts are tokenized with it instead of the policy server's
	// /tokenize (policy.tokenize local).
	tok   *roles.Tokenizer
	local bool
}

// SearchStats counts the searches asked for and the /retrieve calls made
// for them since the engine was built, when searches are coalesced
// (retriever.batch_window_ms under the async schedule); both 0 otherwise.
func (r *Engine) SearchStats() (searches, calls int64) {
	if r.batch == nil {
		return 0, 0
	}
	return r.batch.queries.Load(), r.batch.calls.Load()
}

// Tokenizer is the local tokenizer the engine locates search spans with.
func (r *Engine) Tokenizer() *roles.Tokenizer { return r.tok }

// ended reports a finished (or abandoned) trajectory to the metrics and the
// progress task.
func (r *Engine) ended(t *Trajectory) {
	r.Metrics.TrajectoryDone(t.Finish)
	r.Progress.Add(1)
}

// tokenize tokenizes environment text on a policy server, or in this
// process with policy.tokenize local. Identical texts (the same passages
// retrieved for the same query) are tokenized once per step: the ids are
// shared, read-only.
func (r *Engine) tokenize(ctx context.Context, text string) ([]int, error) {
	r.mu.Lock()
	ids, ok := r.tokCache[text]
	r.mu.Unlock()
	if ok {
		return ids, nil
	}
	if r.local {
		ids = r.tok.Vocab.AppendEncode(nil, text)
	} else if err := r.Replicas.Call(ctx, func(p policy.Policy) (err error) {
		ids, err = p.Tokenize(ctx, r.baseModel, text, false)
		return err
	}); err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	r.mu.Lock()
	if r.tokCache == nil {
		r.tokCache = map[string][]int{}
	}
	r.tokCache[text] = ids
	r.mu.Unlock()
	return ids, nil
}

// ResetStep starts a new step: the retrieval and tokenization caches are
// emptied and retrieval calls are made under ctx.
func (r *Engine) ResetStep(ctx context.Context) {
	r.batch.reset(ctx)
	r.mu.Lock()
	r.tokCache = nil
	r.mu.Unlock()
}

func (r *Engine) invalidTokens(ctx context.Context) ([]int, error) {
	return r.tokenize(ctx, format.InvalidActionText)
}

// PromptIDs applies the chat template to the Search-R1 prompt (with an
// optional hint), see chatIDs.
func (r *Engine) PromptIDs(ctx context.Context, question, hint string) ([]int, error) {
	return r.chatIDs(ctx, format.UserPrompt(question, hint))
}

// chatIDs applies the chat template, with the generation prompt, to one
// user message and tokenizes it: through the policy server, or in this
// process with policy.tokenize local (the local tokenizer's template:
// Qwen2.5's for a tokenizer file, the simulator's for its own).
func (r *Engine) chatIDs(ctx context.Context, user string) ([]int, error) {
	msgs := []policy.Message{{Role: "user", Content: user}}
	if r.local {
		return r.tok.Vocab.AppendEncode(nil, r.tok.Chat(msgs, true)), nil
	}
	var ids []int
	err := r.Replicas.Call(ctx, func(p policy.Policy) (err error) {
		ids, err = p.TokenizeChat(ctx, r.baseModel, msgs, true)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("tokenize prompt: %w", err)
	}
	return ids, nil
}

// PinKey is the key the replicas pin t's requests by under their
// affinity (fleet.Replicas.PinKey): its id, or its group's, the id
// without its "-k<sample>" suffix (an evaluation's trajectory, which has
// none, is its own group).
func (t *Trajectory) PinKey(reps *fleet.Replicas) string {
	group := t.ID
	if i := strings.LastIndex(group, "-k"); i > 0 && i+2 < len(group) && strings.Trim(group[i+2:], "0123456789") == "" {
		group = group[:i]
	}
	return reps.PinKey(t.ID, group)
}

// Live is a trajectory being rolled out: its context so far and its
// response text.
type Live struct {
	t      *Trajectory
	model  string
	sp     policy.Sampling
	seed   int64
	ctxIDs []int
	resp   []byte
	turn   int
	done   bool
	// pending is the action of the last policy turn, before its
	// environment step.
	kind, content string
	tr            Turn
}

// NewLive makes t ready for Lockstep: it will be rolled out on model with
// sampling sp and seed.
func NewLive(t *Trajectory, model string, sp policy.Sampling, seed int64) *Live {
	t.Model = model
	// Room for the response up front: the first turn's append would
	// otherwise copy the prompt into a grown array at once.
	ctx := append(make([]int, 0, 2*len(t.PromptIDs)), t.PromptIDs...)
	return &Live{t: t, model: model, sp: sp, seed: seed, ctxIDs: ctx}
}

// finish closes the trajectory with a reason.
func (l *Live) finish(reason string) {
	if l.t.Finish == "" {
		l.t.Finish = reason
	}
	l.t.Response = string(l.resp)
	l.t.done = time.Now()
	l.done = true
}

// policyTurn samples the next turn of l and appends its tokens. It marks
// l done when the turn answers, when the turn or context budget is spent,
// or after the final answer round (finalRound: the turn after maxTurns),
// which ends the trajectory as answered or as max_turns.
func (r *Engine) policyTurn(ctx context.Context, l *Live) error {
	t := l.t
	turns := r.maxTurns
	if r.finalRound {
		turns++
	}
	if l.turn >= turns {
		l.finish("max_turns")
		return nil
	}
	budget := r.maxCtx - len(l.ctxIDs)
	if budget <= 0 {
		l.finish("context")
		return nil
	}
	req := policy.CompletionRequest{Model: r.Replicas.Wire(l.model), Prompt: l.ctxIDs, MaxTokens: min(r.maxTurn, budget),
		Sampling: l.sp, Stop: format.StopStrings}
	s := roles.Seed(l.seed, int64(l.turn))
	req.Seed = &s
	var c *policy.Completion
	err := r.Replicas.CallKey(ctx, l.model, t.PinKey(r.Replicas), func(p policy.Policy) error {
		if r.Exclusive != nil {
			r.Exclusive.RLock()
			defer r.Exclusive.RUnlock()
		}
		done := r.Phases.Start("rollout_policy")
		var err error
		c, err = p.Complete(ctx, req)
		done()
		if err == nil && len(c.TokenIDs) != len(c.Logprobs) {
			err = fmt.Errorf("%s returned %d tokens and %d logprobs", p.URL(), len(c.TokenIDs), len(c.Logprobs))
		}
		if err == nil {
			r.Sampled.Note(p.URL(), l.model)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("trajectory %s turn %d: %w", t.ID, l.turn, err)
	}
	kind, content := format.ParseAction(c.Text)
	from := len(t.Tokens)
	// The turn's exact bytes, once: the search span and the thought are
	// located in them (the server's text may differ: see SearchTokenMask).
	turnText := string(roles.TurnBytes(r.tok.Vocab, c.TokenIDs, make([]byte, 0, 4*len(c.TokenIDs))))
	// Whole-slice appends: one growth per slice and turn, not one per
	// token.
	t.Tokens = append(t.Tokens, c.TokenIDs...)
	if kind == format.ActionSearch {
		// Located in the sampled ids' bytes: the server's text offsets
		// are not character offsets (vLLM's count "token_id:N").
		t.Search = append(t.Search, searchTokenMask(r.tok.Vocab, c.TokenIDs, turnText)...)
	} else {
		t.Search = append(t.Search, make([]bool, len(c.TokenIDs))...)
	}
	t.Logprobs = append(t.Logprobs, c.Logprobs...)
	n := len(t.Policy)
	t.Policy = append(t.Policy, make([]bool, len(c.TokenIDs))...)
	for j := n; j < len(t.Policy); j++ {
		t.Policy[j] = true
	}
	l.ctxIDs = append(l.ctxIDs, c.TokenIDs...)
	l.resp = append(l.resp, c.Text...)
	l.kind, l.content = kind, content
	l.tr = Turn{Text: c.Text, Action: kind, Content: content, Finish: c.FinishReason, From: from, To: len(t.Tokens),
		ThinkTokens: thinkTokenCount(r.tok.Vocab, c.TokenIDs, turnText)}
	if kind == format.ActionSearch {
		l.tr.Repeated = t.searched(content)
	}
	if c.FinishReason == "length" {
		l.tr.Cut = CutTurnTokens
		if req.MaxTokens < r.maxTurn {
			l.tr.Cut = CutContext
		}
	}
	switch {
	case kind == format.ActionAnswer:
		t.Turns = append(t.Turns, l.tr)
		l.turn++
		l.finish("answer")
	case l.turn == r.maxTurns:
		// The final answer round (only reached with finalRound): whatever
		// it says, no search is run and nothing is appended.
		t.Turns = append(t.Turns, l.tr)
		l.turn++
		l.finish("max_turns")
	}
	return nil
}

// envTurn appends the environment's answer to the last policy turn: the
// <information> block of hits for a search, the invalid-action text
// otherwise.
func (r *Engine) envTurn(ctx context.Context, l *Live, hits []retriever.Hit) error {
	var block string
	switch {
	case l.kind == format.ActionSearch && l.tr.RetrievalError != "":
		block = format.SearchFailedBlock
	case l.kind == format.ActionSearch:
		contents := make([]string, 0, len(hits))
		for _, h := range hits {
			contents = append(contents, h.Contents)
			title, _ := retriever.SplitContents(h.Contents)
			l.tr.Titles = append(l.tr.Titles, title)
		}
		block = format.InfoBlock(contents)
	}
	var env []int
	var err error
	if block != "" {
		env, err = r.tokenize(ctx, block)
		shown := block
		if len(env) > r.maxObs {
			env = env[:r.maxObs]
			l.tr.ObsCut = true
			// What the policy saw of the block: its kept tokens' bytes.
			shown = string(roles.TurnBytes(r.tok.Vocab, env, nil))
		}
		if l.kind == format.ActionSearch && l.tr.RetrievalError == "" {
			l.tr.GoldRetrieved = format.ContainsAnswer(format.InfoText(shown), l.t.Question.Golds)
		}
		l.resp = append(l.resp, block...)
	} else {
		env, err = r.invalidTokens(ctx)
		l.resp = append(l.resp, format.InvalidActionText...)
	}
	if err != nil {
		return fmt.Errorf("trajectory %s turn %d: %w", l.t.ID, l.turn, err)
	}
	t := l.t
	t.Turns = append(t.Turns, l.tr)
	// append(s, make(...)...) extends s with zeros without allocating.
	t.Tokens = append(t.Tokens, env...)
	t.Policy = append(t.Policy, make([]bool, len(env))...)
	t.Search = append(t.Search, make([]bool, len(env))...)
	t.Logprobs = append(t.Logprobs, make([]float64, len(env))...)
	l.ctxIDs = append(l.ctxIDs, env...)
	l.turn++
	return nil
}

// Rollout runs one trajectory to its end on its own (the async schedule).
// seed identifies the request stream; model is the policy model to sample.
func (r *Engine) Rollout(ctx context.Context, t *Trajectory, model string, sp policy.Sampling, seed int64) error {
	l := NewLive(t, model, sp, seed)
	r.Metrics.TrajectoryStarted()
	defer r.ended(t)
	for !l.done {
		if err := r.policyTurn(ctx, l); err != nil {
			return err
		}
		if l.done {
			break
		}
		var hits []retriever.Hit
		if l.kind == format.ActionSearch {
			done := r.Phases.Start("rollout_retrieve")
			var err error
			hits, err = r.search(ctx, l.content)
			done()
			if err != nil && !r.observed(ctx, l, err) {
				return fmt.Errorf("trajectory %s turn %d: retrieve: %w", t.ID, l.turn, err)
			}
		}
		if err := r.envTurn(ctx, l, hits); err != nil {
			return err
		}
	}
	return nil
}

// Once answers t's question in one policy turn, stopped at </answer>:
// with strategy direct the question alone, with rag the retriever's top-k
// passages for it with it (format.DirectPrompt, format.RAGPrompt), on
// model with sampling sp and seed. t is not scored.
func (r *Engine) Once(ctx context.Context, t *Trajectory, strategy, model string, sp policy.Sampling, seed int64) error {
	prompt := format.DirectPrompt(t.Question.Question)
	if strategy == format.StrategyRAG {
		done := r.Phases.Start("rollout_retrieve")
		hits, err := r.retriever.Retrieve(ctx, []string{t.Question.Question}, r.topk)
		done()
		if err != nil {
			return fmt.Errorf("question %s: retrieve: %w", t.Question.ID, err)
		}
		var contents []string
		if len(hits) > 0 {
			for _, h := range hits[0] {
				contents = append(contents, h.Contents)
			}
		}
		prompt = format.RAGPrompt(t.Question.Question, contents)
	}
	ids, err := r.chatIDs(ctx, prompt)
	if err != nil {
		return fmt.Errorf("question %s: %w", t.Question.ID, err)
	}
	t.PromptIDs = ids
	err = r.Replicas.CallKey(ctx, "", t.PinKey(r.Replicas), func(p policy.Policy) error {
		c, err := p.Complete(ctx, policy.CompletionRequest{Model: model, Prompt: ids, MaxTokens: r.maxTurn,
			Sampling: sp, Seed: &seed, Stop: []string{"</answer>"}})
		if err != nil {
			return err
		}
		t.Model = model
		t.Tokens, t.Logprobs = c.TokenIDs, c.Logprobs
		kind, content := format.ParseAction(c.Text)
		t.Turns = []Turn{{Text: c.Text, Action: kind, Content: content, Finish: c.FinishReason}}
		t.Finish = c.FinishReason
		return nil
	})
	if err != nil {
		return fmt.Errorf("question %s: %w", t.Question.ID, err)
	}
	return nil
}

// search retrieves one query through the batcher, or directly without one.
func (r *Engine) search(ctx context.Context, query string) ([]retriever.Hit, error) {
	query = boundQuery(query)
	if r.batch != nil {
		return r.batch.search(ctx, query)
	}
	hits, err := r.retriever.Retrieve(ctx, []string{query}, r.topk)
	if err != nil {
		return nil, err
	}
	if len(hits) != 1 {
		return nil, fmt.Errorf("retrieve: %d results for 1 query", len(hits))
	}
	return hits[0], nil
}

// Lockstep rolls out every trajectory with Search-R1's turn-level
// batching: the next turn of every live trajectory together, then every
// search of that turn in batched /retrieve calls, then the next turn.
func (r *Engine) Lockstep(ctx context.Context, ls []*Live, concurrency int) error {
	for range ls {
		r.Metrics.TrajectoryStarted()
	}
	ended := make([]bool, len(ls))
	defer func() {
		for i, l := range ls {
			if !ended[i] {
				r.ended(l.t)
			}
		}
	}()
	for {
		var active []*Live
		for i, l := range ls {
			if !l.done {
				active = append(active, l)
			} else if !ended[i] {
				ended[i] = true
				r.ended(l.t)
			}
		}
		if len(active) == 0 {
			return nil
		}
		p := pool.New().WithContext(ctx).WithCancelOnError().WithFirstError().WithMaxGoroutines(max(concurrency, 1))
		for _, l := range active {
			p.Go(func(ctx context.Context) error { return r.policyTurn(ctx, l) })
		}
		if err := p.Wait(); err != nil {
			return err
		}
		var searching []*Live
		var queries []string
		for _, l := range active {
			if !l.done && l.kind == format.ActionSearch {
				searching = append(searching, l)
				queries = append(queries, boundQuery(l.content))
			}
		}
		hits := make([][]retriever.Hit, len(queries))
		batch := max(r.maxBatch, 1)
		for lo := 0; lo < len(queries); lo += batch {
			hi := min(lo+batch, len(queries))
			done := r.Phases.Start("rollout_retrieve")
			h, err := r.retriever.Retrieve(ctx, queries[lo:hi], r.topk)
			done()
			if err == nil && len(h) != hi-lo {
				err = fmt.Errorf("%d results for %d queries", len(h), hi-lo)
			}
			if err != nil {
				for _, l := range searching[lo:hi] {
					if !r.observed(ctx, l, err) {
						return fmt.Errorf("retrieve: %w", err)
					}
				}
				continue
			}
			copy(hits[lo:hi], h)
		}
		byLive := map[*Live][]retriever.Hit{}
		for i, l := range searching {
			byLive[l] = hits[i]
		}
		p = pool.New().WithContext(ctx).WithCancelOnError().WithFirstError().WithMaxGoroutines(max(concurrency, 1))
		for _, l := range active {
			if l.done {
				continue
			}
			p.Go(func(ctx context.Context) error { return r.envTurn(ctx, l, byLive[l]) })
		}
		if err := p.Wait(); err != nil {
			return err
		}
	}
}

// observed makes a failed search l's observation (retriever.on_error
// observe): the turn records why and the environment answers
// format.SearchFailedBlock. It reports false, and records nothing, when
// failed searches are the rollout's errors or when ctx has ended (a
// cancelled step is not a retriever's failure).
func (r *Engine) observed(ctx context.Context, l *Live, err error) bool {
	if !r.observeErrors || ctx.Err() != nil {
		return false
	}
	l.tr.RetrievalError = cutUTF8(err.Error(), maxErrorBytes)
	return true
}

// maxErrorBytes bounds the retrieval error a turn records.
const maxErrorBytes = 300

// searched reports whether query repeats a search of t's earlier turns:
// the same words, case and spacing aside.
func (t *Trajectory) searched(query string) bool {
	q := queryKey(query)
	for _, tr := range t.Turns {
		if tr.Action == format.ActionSearch && queryKey(tr.Content) == q {
			return true
		}
	}
	return false
}

// queryKey is a query's words, lower case, single-spaced.
func queryKey(q string) string { return strings.Join(strings.Fields(strings.ToLower(q)), " ") }

// Score sets the trajectory's reward (exact match) and F1 from its last
// answer. Only the policy's own text is searched: the invalid-action text
// the environment appends holds an "<answer> and </answer>" of its own.
func (t *Trajectory) Score() {
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

// MaxQueryBytes bounds the query sent to the retriever: a policy that
// writes a huge <search> block still sends a reasonable request (the turn
// keeps the whole text).
const MaxQueryBytes = 2000

// boundQuery cuts q to MaxQueryBytes on a UTF-8 boundary.
func boundQuery(q string) string { return cutUTF8(q, MaxQueryBytes) }

// cutUTF8 cuts s to at most n bytes, at a character boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// NewEngine builds the rollout engine of a recipe over deps; it needs the
// local tokenizer (Deps.Tokenizer).
func NewEngine(r *recipes.Recipe, deps roles.Deps, clock *metrics.Phases) (*Engine, error) {
	tok, err := deps.LocalTokenizer()
	if err != nil {
		return nil, err
	}
	window := time.Duration(r.Retriever.BatchWindowMS * float64(time.Millisecond))
	reps := fleet.New(deps.Policies)
	reps.Affinity, reps.AffinityMargin = r.Policy.Affinity, r.Policy.AffinityMargin
	if deps.Router != nil && deps.RouterAdmin != nil {
		reps.UseRouter(deps.Router, deps.RouterAdmin)
	}
	return &Engine{Replicas: reps, retriever: deps.Retriever, topk: r.Retriever.TopK,
		maxTurns: r.Rollout.MaxTurns, maxTurn: r.Rollout.MaxTurnTokens, maxObs: r.Rollout.MaxObsTokens,
		maxCtx: r.Rollout.MaxContextTokens, baseModel: r.Policy.Model, Phases: clock, finalRound: r.Rollout.FinalAnswerRound,
		batch:    newBatcher(deps.Retriever, r.Retriever.TopK, window, r.Retriever.MaxBatch, r.Retriever.Cache),
		maxBatch: r.Retriever.MaxBatch, tok: tok, local: r.Policy.Tokenize == recipes.TokenizeLocal,
		observeErrors: r.Retriever.OnError == recipes.OnErrorObserve}, nil
}
