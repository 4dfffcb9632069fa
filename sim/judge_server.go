package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// JudgeServer is the simulated judge: an OpenAI-compatible chat endpoint
// (PROTOCOLS.md §3). It reads the orchestrator's critique prompt (the
// "Question:", optional "Gold answer(s):" and "Trajectory:" sections of the
// default template) and writes a short, directive critique of the search
// behaviour. With the gold answers it can look through the corpus for a
// passage that holds an answer and tell the agent what to search for; without
// them it can only suggest a question entity the agent has not searched yet,
// so its critiques are less useful, as the method's ablation expects.
type JudgeServer struct {
	// Delay is the simulated time of one chat request (Latency.Judge);
	// set it before the server takes requests.
	Delay time.Duration

	model  string
	apiKey string
	corpus []judgePassage
	// words maps each word of the corpus to the passages holding it, so a
	// gold answer is looked up among the passages of its rarest word.
	words map[string][]int32
	calls atomic.Int64
	gen   GenerationConfig
	// tk is Qwen2.5's tokenizer (the judge model's), for token counts and
	// the token cap; tkErr is why there is none.
	tk    *Tokenizer
	tkErr error
	// ignored counts the request fields accepted and ignored (vLLM's chat
	// request model ignores the fields it lacks).
	ignored ignoredFields
}

// SetGenerationConfig sets the generation config the judge model ships: a
// request's omitted sampling fields take its values, as vLLM's chat
// completions do. Call it before the server takes requests.
func (s *JudgeServer) SetGenerationConfig(gc GenerationConfig) { s.gen = gc }

// SetTokenizer makes the judge count and cap tokens with tk (Qwen2.5's, as
// NewJudgeServer's own) instead of a tokenizer of its own. Call it before
// the server takes requests.
func (s *JudgeServer) SetTokenizer(tk *Tokenizer) { s.tk, s.tkErr = tk, nil }

// Calls returns the number of chat requests answered or being answered
// (requests refused before the model check are not counted).
func (s *JudgeServer) Calls() int64 { return s.calls.Load() }

type judgePassage struct {
	title string
	norm  string // " " + lowercase words + " "
}

// NewJudgeServer returns a simulated judge serving model over corpus (the
// wiki-18 contents strings), whose generation config is
// QwenInstructGenerationConfig's and whose tokens are Qwen2.5's. A
// non-empty apiKey is required as a bearer token.
func NewJudgeServer(model, apiKey string, corpus []string) *JudgeServer {
	s := &JudgeServer{model: model, apiKey: apiKey, words: map[string][]int32{}, gen: QwenInstructGenerationConfig()}
	s.tk, s.tkErr = NewTokenizer()
	for i, c := range corpus {
		title := c
		if j := strings.IndexByte(c, '\n'); j >= 0 {
			title = c[:j]
		}
		norm := looseNorm(c)
		s.corpus = append(s.corpus, judgePassage{title: strings.Trim(title, "\" "), norm: " " + norm + " "})
		seen := map[string]bool{}
		for _, w := range strings.Fields(norm) {
			if !seen[w] {
				seen[w] = true
				s.words[w] = append(s.words[w], int32(i))
			}
		}
	}
	return s
}

// looseNorm lower-cases and turns everything but letters and digits into
// single spaces.
func looseNorm(s string) string {
	var b strings.Builder
	space := true
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 0x7f {
			b.WriteRune(r)
			space = false
		} else if !space {
			b.WriteByte(' ')
			space = true
		}
	}
	return strings.TrimSpace(b.String())
}

// IgnoredFields returns, for every "ROUTE FIELD" that requests carried and
// the server ignored, the number of requests that carried it (see
// PolicyServer.IgnoredFields).
func (s *JudgeServer) IgnoredFields() map[string]int { return s.ignored.snapshot() }

// Handler returns the server's routes.
func (s *JudgeServer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{{"id": s.model, "object": "model", "owned_by": Fingerprint}}})
	})
	return labelled(mux)
}

func (s *JudgeServer) chat(w http.ResponseWriter, r *http.Request) {
	if s.apiKey != "" && r.Header.Get("Authorization") != "Bearer "+s.apiKey {
		openAIError(w, http.StatusUnauthorized, "AuthenticationError", "invalid or missing bearer token")
		return
	}
	var req struct {
		Model               string        `json:"model"`
		Messages            []chatMessage `json:"messages"`
		MaxTokens           *int          `json:"max_tokens"`
		MaxCompletionTokens *int          `json:"max_completion_tokens"`
		samplingFields
		Seed *int64 `json:"seed"`
	}
	err := s.ignored.decode(w, r, "POST /v1/chat/completions", &req)
	if err != nil {
		openAIError(w, http.StatusBadRequest, "BadRequestError", err.Error())
		return
	}
	// Omitted sampling fields come from the generation config, then
	// vLLM's defaults; the token cap is max_completion_tokens, else
	// max_tokens, else the config's max_new_tokens, else the room left in
	// the context.
	sp, err := req.samplingFields.resolve(s.gen)
	if err != nil {
		openAIError(w, http.StatusBadRequest, "BadRequestError", err.Error())
		return
	}
	if s.tk == nil {
		openAIError(w, http.StatusInternalServerError, "InternalServerError", s.tkErr.Error())
		return
	}
	// The prompt is the chat template's, in Qwen2.5's tokens.
	promptTokens := len(s.tk.Encode(ChatTemplate(req.Messages, true)))
	maxTokens := maxModelLen - promptTokens
	switch {
	case req.MaxCompletionTokens != nil:
		maxTokens = min(*req.MaxCompletionTokens, maxTokens)
	case req.MaxTokens != nil:
		maxTokens = min(*req.MaxTokens, maxTokens)
	case s.gen.MaxNewTokens != nil:
		maxTokens = min(*s.gen.MaxNewTokens, maxTokens)
	}
	if maxTokens < 1 {
		openAIError(w, http.StatusBadRequest, "BadRequestError", "max_tokens must be at least 1")
		return
	}
	if req.Model != s.model {
		openAIError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	if len(req.Messages) == 0 {
		openAIError(w, http.StatusBadRequest, "BadRequestError", "messages must not be empty")
		return
	}
	n := s.calls.Add(1)
	if !sleepCtx(r.Context(), s.Delay) {
		return // the client left
	}
	var rng *rand.Rand
	if req.Seed != nil {
		rng = rand.New(rand.NewPCG(uint64(*req.Seed), 0x6a75646765))
	} else {
		rng = rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(n)))
	}
	content := s.sampleCritique(req.Messages[len(req.Messages)-1].Content, sp, rng)
	// The critique ends with <|im_end|>, one more token; past the cap it
	// is cut after maxTokens tokens, as a length stop cuts it.
	ids := s.tk.Encode(content)
	finish, completionTokens := "stop", len(ids)+1
	if len(ids) > maxTokens {
		var ts textStream
		for _, id := range ids[:maxTokens] {
			ts.add(s.tk, id, false)
		}
		content, finish, completionTokens = string(ts.text), "length", maxTokens
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": fmt.Sprintf("chatcmpl-sim-%d", n), "object": "chat.completion", "created": time.Now().Unix(),
		"model": s.model, "system_fingerprint": Fingerprint,
		"choices": []map[string]any{{"index": 0, "message": map[string]any{"role": "assistant", "content": content}, "finish_reason": finish}},
		"usage": map[string]int{"prompt_tokens": promptTokens, "completion_tokens": completionTokens,
			"total_tokens": promptTokens + completionTokens},
	})
}

// judgeInput is what the simulated judge reads from the critique prompt.
type judgeInput struct {
	question   string
	golds      []string
	searches   []string
	titles     map[string]bool
	trajectory string
}

func parseJudgePrompt(p string) judgeInput {
	in := judgeInput{titles: map[string]bool{}}
	traj := p
	if i := strings.Index(p, "Trajectory:"); i >= 0 {
		traj = p[i+len("Trajectory:"):]
		p = p[:i]
	}
	for _, line := range strings.Split(p, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "Question:"):
			in.question = strings.TrimSpace(strings.TrimPrefix(line, "Question:"))
		case strings.HasPrefix(line, "Gold answer(s):"):
			for _, g := range strings.Split(strings.TrimPrefix(line, "Gold answer(s):"), " | ") {
				if g = strings.TrimSpace(g); g != "" {
					in.golds = append(in.golds, g)
				}
			}
		}
	}
	in.trajectory = traj
	for _, m := range reSearch.FindAllStringSubmatch(traj, -1) {
		in.searches = append(in.searches, normText(m[1]))
	}
	for _, m := range reInfo.FindAllStringSubmatch(traj, -1) {
		for _, d := range parseDocs(m[1]) {
			in.titles[normText(d.title)] = true
		}
	}
	return in
}

// Critique writes the simulated judge's greedy critique for one prompt:
// the most likely of Critiques.
func (s *JudgeServer) Critique(prompt string) string {
	return s.Critiques(prompt)[0]
}

// judgeLogits are the logits of the simulated judge's candidate critiques,
// most likely first (the judge is unsure: at Qwen2.5 instruct's default
// temperature 0.7 and top_p 0.8 it writes the second one about a third of
// the time).
var judgeLogits = []float64{1, 0.5, 0}

// sampleCritique draws one of prompt's critiques with sp, as vLLM would
// sample a judge model whose candidate completions have judgeLogits:
// greedy takes the first; the repetition penalty applies to every
// candidate (each is made of words of the prompt, which holds the
// question, the titles and the instructions it quotes); the presence and
// frequency penalties have nothing to act on in a one-step choice.
func (s *JudgeServer) sampleCritique(prompt string, sp Sampling, rng *rand.Rand) string {
	cs := s.Critiques(prompt)
	rep := sp.RepetitionPenalty
	if rep <= 0 {
		rep = 1
	}
	es := make([]entry, len(cs))
	for i := range cs {
		l := judgeLogits[min(i, len(judgeLogits)-1)]
		if l > 0 {
			l /= rep
		} else {
			l *= rep
		}
		es[i] = entry{id: i, n: 1, p: math.Exp(l)}
	}
	return cs[es[pick(es, sp, rng)].id]
}

// Critiques lists the simulated judge's candidate critiques for one
// prompt, best first: the one its rules pick (what the gold passage says
// to search for, or an entity of the question not searched yet, or a
// generic advice), then a question entity not searched yet, then the
// generic advice (each once).
func (s *JudgeServer) Critiques(prompt string) []string {
	in := parseJudgePrompt(prompt)
	if in.question == "" {
		return []string{"I cannot find the question in this prompt, so I have no critique."}
	}
	searched := func(q string) bool {
		for _, s := range in.searches {
			if s == normText(q) {
				return true
			}
		}
		return false
	}
	var out []string
	if title := s.goldPassage(in); title != "" {
		switch {
		case in.titles[normText(title)]:
			out = append(out, fmt.Sprintf("You retrieved the right passage but answered wrongly. Search for \"%s\" again and read that passage closely before answering.", title))
		case len(in.searches) == 0:
			out = append(out, fmt.Sprintf("You answered without searching. Search for \"%s\" first and answer from that passage.", title))
		default:
			out = append(out, fmt.Sprintf("Your searches missed the passage that holds the answer. Search for \"%s\" next and answer from it.", title))
		}
	}
	for _, e := range entities(in.question, true) {
		if !searched(e) {
			out = append(out, fmt.Sprintf("Search for \"%s\" on its own before answering.", e))
			break
		}
	}
	return append(out, "Your searches were too broad; search for one entity of the question at a time and check the passages before answering.")
}

// goldPassage returns the title of the corpus passage that holds a gold
// answer and best matches the question, preferring titles that do not give
// the answer away ("" without gold answers or a match).
func (s *JudgeServer) goldPassage(in judgeInput) string {
	var golds []string
	for _, g := range in.golds {
		n := looseNorm(g)
		if n != "" && n != "yes" && n != "no" {
			golds = append(golds, " "+n+" ")
		}
	}
	if len(golds) == 0 {
		return ""
	}
	qWords := contentWords(in.question)
	best, bestScore := "", -1.0
	// Only passages holding the rarest word of some gold answer can hold
	// that answer; they are visited in corpus order.
	var cand []int32
	for _, g := range golds {
		var rarest []int32
		for i, w := range strings.Fields(g) {
			if ps := s.words[w]; i == 0 || len(ps) < len(rarest) {
				rarest = ps
			}
		}
		cand = append(cand, rarest...)
	}
	slices.Sort(cand)
	cand = slices.Compact(cand)
	for _, pi := range cand {
		p := s.corpus[pi]
		hit := false
		for _, g := range golds {
			if strings.Contains(p.norm, g) {
				hit = true
				break
			}
		}
		if !hit {
			continue
		}
		score := 0.0
		for _, w := range qWords {
			if strings.Contains(p.norm, " "+w+" ") {
				score++
			}
		}
		nt := " " + looseNorm(p.title) + " "
		for _, g := range golds {
			if strings.Contains(nt, g) {
				score -= 0.5 // the title itself would give the answer away
			}
		}
		if score > bestScore {
			best, bestScore = p.title, score
		}
	}
	return best
}
