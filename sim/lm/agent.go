package lm

import (
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/hindsearch/hindsearch/clients/policy/format"
)

// The simulated policy is a small stochastic search agent. At the start of
// each turn it reads its whole context (question, optional hint, earlier
// searches and the passages the real retriever returned for them). It then
// searches or answers (a learnable sigmoid). An answer is one of a finite
// set of candidate turns, spans of the retrieved passages, chosen by a
// softmax over hand-made features. A search query is composed word by word
// (query.go): each word a softmax over the words of the context, then an
// end. The logprob of every token is its exact conditional under this
// model, mixed with a uniform floor epsilon over the vocabulary so that any
// sequence has a finite score. Sampling, scoring and gradients all use this
// one model, with the learnable parameter vector Params.

// Parameter indices of Params.
const (
	// type (search vs answer) features
	PSearchBias = iota
	PSearchFirst
	PSearchMore
	PSearchFound
	// query composition features (query.go): a query is a sequence of
	// words, each a softmax over the words of the context, then an end.
	PQueryEnd
	PQueryEndLen
	PQueryEndPhrase
	PWordQEntity
	PWordQContent
	PWordQStop
	PWordTitle
	PWordPassage
	PWordNext
	PWordUsed
	PWordSearched
	PWordBridge
	// answer choice features
	PAnswerRank
	PAnswerTitle
	PAnswerInQuestion
	PAnswerTypeMatch
	PAnswerProximity
	PAnswerOption
	PAnswerLatest
	PAnswerLength
	PAnswerFrequency
	PAnswerQueryTitle
	PAnswerSearched
	PAnswerQuerySentence
	PAnswerContext
	PAnswerLead
	PAnswerRecognised
	// NumParams is the length of Params.
	NumParams
)

// ParamNames names each parameter, for adapters and logs.
var ParamNames = [NumParams]string{
	"search_bias", "search_first", "search_more", "search_found",
	"query_end", "query_end_length", "query_end_phrase",
	"word_question_entity", "word_question_content", "word_question_stop",
	"word_title", "word_passage", "word_next", "word_used", "word_searched", "word_bridge",
	"answer_rank", "answer_title", "answer_in_question", "answer_type_match",
	"answer_proximity", "answer_option", "answer_latest", "answer_length",
	"answer_frequency", "answer_query_title", "answer_searched", "answer_query_sentence",
	"answer_context", "answer_lead", "answer_recognised",
}

// Fixed (not learnable) instruction-following strengths: how much a hint in
// the context moves the policy. The student never sees a hint, so these get
// no gradient; they make the hinted teacher differ from the student. The
// word-level ones act on the hint's quoted phrases (query.go): every word of
// a quoted phrase gets hintWordBoost on its logit, the word that continues a
// quoted phrase from the query's last word (or starts one, for a query's
// first word) hintNextBoost more, and ending the query right after a whole
// quoted phrase hintEndBoost.
const (
	hintSearchBoost = 1.5
	hintWordBoost   = 2.0
	hintNextBoost   = 2.0
	hintEndBoost    = 3.0
	unknownBoost    = 2.0
	maxAnswerCands  = 80
)

// Params is the simulated policy's learnable parameter vector.
type Params []float64

// InitialParams is the base model's parameters: an agent that mostly
// searches first only half the time and rarely searches twice and reads
// passages with no sense yet of what an answer looks like: it favours long
// spans from top passages and ignores the answer type the question asks for.
func InitialParams() Params {
	p := make(Params, NumParams)
	p[PSearchBias] = -1
	p[PSearchFirst] = 1
	p[PQueryEnd] = 1.5
	p[PQueryEndLen] = 1
	p[PQueryEndPhrase] = 0.5
	p[PWordQEntity] = 1
	p[PWordQContent] = 0.5
	p[PWordNext] = 2.5
	p[PWordUsed] = -3
	p[PAnswerRank] = 0.5
	p[PAnswerTypeMatch] = 2
	p[PAnswerInQuestion] = -2
	p[PAnswerProximity] = 1
	p[PAnswerContext] = 1
	p[PAnswerQueryTitle] = 1
	p[PAnswerRecognised] = 0.7
	return p
}

// Thought texts: the first differing token encodes the action type, so the
// query choice is expressed inside the <search> span itself.
const (
	thoughtSearch = "<think> I need more information. </think>\n"
	thoughtAnswer = "<think> I have enough information. </think>\n"
)

// searchTurnEnd follows a search turn's </search>: what a model trained on
// Search-R1's rollouts writes next (their <information> block starts with a
// blank line). With Qwen's tokenizer " </search>\n\n" ends in the tokens
// " </", "search", ">\n\n", so the token that completes the stop string
// </search> runs past it, as the ids vLLM returns for a real model do.
const searchTurnEnd = "\n\n"

// doc is one retrieved passage as the policy reads it from its context.
type doc struct {
	title, text string
	rank        int
}

// turnState is what the policy reads from its context at a turn start.
type turnState struct {
	question string
	hint     string
	searches []string
	// rawSearches are the searches as written (searches are normalised).
	rawSearches  []string
	blocks       [][]doc
	invalid      int
	hasAssistant bool
	canSearch    bool
	// golds are the question's gold answers, for the reading skill
	// (Model.SetAnswers); nil when the model was not given them.
	golds []string
}

var (
	reSearch = regexp.MustCompile(`(?s)<search>(.*?)</search>`)
	// An <information> block ends at its closing tag or, when the
	// rollout cut it at rollout.max_obs_tokens as Search-R1 does (the
	// closing tag is then lost), at the next turn's <think> or the end.
	reInfo    = regexp.MustCompile(`(?s)<information>(.*?)(?:</information>|<think>|$)`)
	reDocHead = regexp.MustCompile(`Doc (\d+)\(Title: `)
	reQuoted  = regexp.MustCompile(`"([^"]{2,80})"`)
)

// assistantHeader starts the generated part of the chat template.
const assistantHeader = TokIMStart + "assistant\n"

// parseState reads the turn state from the context text before a turn.
func parseState(text string) turnState {
	var st turnState
	ai := strings.LastIndex(text, assistantHeader)
	if ai < 0 {
		return st
	}
	st.hasAssistant = true
	prompt, response := text[:ai], text[ai+len(assistantHeader):]
	user := prompt
	if ui := strings.LastIndex(prompt, TokIMStart+"user\n"); ui >= 0 {
		user = prompt[ui+len(TokIMStart+"user\n"):]
	}
	user = strings.TrimSuffix(strings.TrimRight(user, "\n"), TokIMEnd)
	if qi := strings.LastIndex(user, "Question:"); qi >= 0 {
		st.question = strings.TrimSpace(user[qi+len("Question:"):])
		if hi := strings.LastIndex(user[:qi], "Hint:"); hi >= 0 {
			st.hint = strings.TrimSpace(user[hi+len("Hint:") : qi])
		}
	}
	for _, m := range reSearch.FindAllStringSubmatch(response, -1) {
		st.searches = append(st.searches, normText(m[1]))
		st.rawSearches = append(st.rawSearches, strings.TrimSpace(m[1]))
	}
	for _, m := range reInfo.FindAllStringSubmatch(response, -1) {
		st.blocks = append(st.blocks, parseDocs(m[1]))
	}
	st.invalid = strings.Count(response, "My previous action is invalid.")
	// Passages given in the prompt itself (a RAG prompt) are read first.
	var given [][]doc
	for _, m := range reInfo.FindAllStringSubmatch(user, -1) {
		// The Search-R1 instruction names the tags ("between <information>
		// and </information>"): only blocks that hold passages count.
		if docs := parseDocs(m[1]); len(docs) > 0 {
			given = append(given, docs)
		}
	}
	st.blocks = append(given, st.blocks...)
	// The agent searches only when its prompt offers the search tool.
	st.canSearch = strings.Contains(user, "<search> query </search>")
	return st
}

// parseDocs splits an <information> body into its "Doc i(Title: t) text"
// entries.
func parseDocs(body string) []doc {
	heads := reDocHead.FindAllStringIndex(body, -1)
	var docs []doc
	for i, h := range heads {
		end := len(body)
		if i+1 < len(heads) {
			end = heads[i+1][0]
		}
		rest := body[h[1]:end]
		var title, text string
		if strings.HasPrefix(rest, "\"") {
			if j := strings.Index(rest[1:], "\") "); j >= 0 {
				title, text = rest[1:1+j], rest[1+j+3:]
			}
		}
		if title == "" {
			if j := strings.Index(rest, ") "); j >= 0 {
				title, text = strings.Trim(rest[:j], "\""), rest[j+2:]
			} else {
				title = strings.Trim(rest, "\" \n")
			}
		}
		docs = append(docs, doc{title: strings.TrimSpace(title), text: strings.TrimSpace(text), rank: i})
	}
	return docs
}

// candidate is one complete answer turn the policy may produce.
type candidate struct {
	text    string
	ids     []int
	content string
	logp    float64
	grad    []float64
}

type featCand struct {
	content string
	phi     []float64 // indexed by parameter; only the type's block is used
	fixed   float64
}

// turnParts are a turn's two branches: the answer candidates (whole
// turns, each with its logprob including P(answer)) and the search branch
// (nil when the agent cannot search), whose query is composed word by word.
type turnParts struct {
	answers []candidate
	search  *queryModel
}

// buildTurn makes a state's answer candidates and search branch under
// params, with each one's logprob and gradient, and bh's abnormal turns.
func buildTurn(st turnState, params Params, tk *Tokenizer, bh Behaviour) turnParts {
	thS, thA := bh.thoughts(params)
	abnormal, logRest := bh.abnormal(st, thS, tk)
	var q *queryModel
	if st.canSearch {
		q = newQueryModel(st, params, tk, thS)
	}
	answers := answerFeatures(st)
	// Type probability: P(search) = sigmoid(z).
	phiT := make([]float64, NumParams)
	phiT[PSearchBias] = 1
	if len(st.searches) == 0 {
		phiT[PSearchFirst] = 1
	}
	phiT[PSearchMore] = math.Min(float64(len(st.searches)), 3) / 3
	// The reading skill also tells the agent whether what it has read
	// holds the answer (a recognised span): searching on after that is a
	// choice it can learn to stop making.
	for _, fc := range answers {
		if fc.phi[PAnswerRecognised] != 0 {
			phiT[PSearchFound] = 1
			break
		}
	}
	z := dot(params, phiT) + bh.SearchBias
	if st.hint != "" {
		z += hintSearchBoost
	}
	logPS, logPA := logSigmoid(z), logSigmoid(-z)
	gS := scale(phiT, 1-sigmoid(z))
	gA := scale(phiT, -sigmoid(z))
	if len(answers) == 0 {
		logPS, gS = 0, make([]float64, NumParams)
	}
	if q == nil {
		logPA, gA = 0, make([]float64, NumParams)
	} else {
		q.logPS, q.gS = logPS+logRest, gS
	}
	logPA += logRest
	var out []candidate
	if len(answers) > 0 {
		logits := make([]float64, len(answers))
		for i, fc := range answers {
			logits[i] = dot(params, fc.phi) + fc.fixed
		}
		lse := logSumExp(logits)
		mean := make([]float64, NumParams)
		for i, fc := range answers {
			p := math.Exp(logits[i] - lse)
			for j, v := range fc.phi {
				mean[j] += p * v
			}
		}
		for i, fc := range answers {
			g := make([]float64, NumParams)
			for j := range g {
				g[j] = gA[j] + fc.phi[j] - mean[j]
			}
			text := thA + "<answer> " + fc.content + " </answer>"
			out = append(out, candidate{text: text, ids: tk.encodeShared(text),
				content: fc.content, logp: logPA + logits[i] - lse, grad: g})
		}
	}
	return turnParts{answers: append(out, abnormal...), search: q}
}

var stopWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`a an the of in on at to for by with from and or is are was were be been
	being do does did what which who whom whose when where why how that this these those it its as
	than then there their they he she his her him i you your we our us me my not no yes into about
	after before during over under between both either same also more most many much name named
	first last one two has have had can could will would should may might s`) {
		stopWords[w] = true
	}
}

// words returns the words of s: each match of the regexp
// [A-Za-z0-9][A-Za-z0-9'\-.]* with trailing ".'-" trimmed. A hand scan (the
// classes are ASCII, so bytes do): this runs for every candidate span of
// every turn, and the regexp was a tenth of the simulator's CPU.
func words(s string) []string {
	var ws []string
	for i := 0; i < len(s); {
		if !isWordStart(s[i]) {
			i++
			continue
		}
		j := i + 1
		for j < len(s) && (isWordStart(s[j]) || s[j] == '\'' || s[j] == '-' || s[j] == '.') {
			j++
		}
		ws = append(ws, strings.TrimRight(s[i:j], ".'-"))
		i = j
	}
	return ws
}

func isWordStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// contentWords are the lower-case words of s that are not stop words.
func contentWords(s string) []string { return contentOf(words(s)) }

// contentOf is contentWords of words already split.
func contentOf(ws []string) []string {
	var out []string
	for _, w := range ws {
		lw := strings.ToLower(w)
		if lw != "" && !stopWords[lw] {
			out = append(out, lw)
		}
	}
	return out
}

// sanitize makes a phrase safe inside a tag: no angle brackets, one line.
func sanitize(s string) string {
	s = strings.NewReplacer("<", " ", ">", " ", "\n", " ").Replace(s)
	return strings.Join(strings.Fields(s), " ")
}

// normText lower-cases and collapses a phrase for comparisons.
func normText(s string) string {
	return strings.ToLower(strings.Join(strings.Fields(strings.Trim(s, " \"'?.,")), " "))
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

var questionWords = map[string]bool{"which": true, "who": true, "what": true, "when": true, "where": true,
	"how": true, "in": true, "is": true, "are": true, "was": true, "were": true, "did": true, "do": true,
	"does": true, "the": true, "on": true, "for": true, "at": true, "whose": true, "whom": true, "why": true}

// entities returns maximal runs of capitalised words (allowing inner
// "of"/"the"/"and" followed by a capitalised word) and multi-digit numbers.
func entities(s string, skipFirst bool) []string {
	ws := words(s)
	var out []string
	for i := 0; i < len(ws); i++ {
		if !isCap(ws[i]) || (i == 0 && skipFirst && questionWords[strings.ToLower(ws[i])]) {
			continue
		}
		j := i + 1
		for j < len(ws) && j-i < 6 {
			if isCap(ws[j]) {
				j++
				continue
			}
			lw := strings.ToLower(ws[j])
			if (lw == "of" || lw == "the" || lw == "and" || lw == "de") && j+1 < len(ws) && isCap(ws[j+1]) {
				j += 2
				continue
			}
			break
		}
		if e := strings.Join(ws[i:j], " "); !months[strings.ToLower(e)] {
			out = append(out, e)
		}
		i = j - 1
	}
	return out
}

func isCap(w string) bool { return w != "" && w[0] >= 'A' && w[0] <= 'Z' }

func isNumber(w string) bool {
	digits := 0
	for _, c := range w {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == ',' || c == '.':
		default:
			return false
		}
	}
	return digits > 0
}

func isYear(w string) bool {
	return len(w) == 4 && isNumber(w) && (w[0] == '1' || w[0] == '2')
}

var months = map[string]bool{"january": true, "february": true, "march": true, "april": true, "may": true,
	"june": true, "july": true, "august": true, "september": true, "october": true, "november": true, "december": true}

// questionType classifies what kind of answer the question wants.
func questionType(q string) string {
	lq := strings.ToLower(q)
	ws := strings.Fields(lq)
	if len(ws) == 0 {
		return ""
	}
	switch ws[0] {
	case "is", "are", "was", "were", "do", "does", "did", "can", "could", "has", "have", "will", "would", "should":
		return "yesno"
	}
	switch {
	case strings.Contains(lq, "what year") || strings.HasPrefix(lq, "when") || strings.Contains(lq, " when "):
		return "year"
	case strings.Contains(lq, "how many") || strings.Contains(lq, "how much") || strings.Contains(lq, "how old"):
		return "number"
	case strings.HasPrefix(lq, "who") || strings.Contains(lq, " who "):
		return "person"
	}
	for i, w := range ws {
		if w != "what" && w != "which" {
			continue
		}
		for _, n := range ws[i+1 : min(i+3, len(ws))] {
			if kindNouns[strings.Trim(n, "?,.")] {
				return "kind"
			}
		}
	}
	return "entity"
}

// kindNouns, after "what" or "which", ask what kind of thing the answer
// is: its answer is a common noun phrase ("journalist", "punk rock").
var kindNouns = map[string]bool{"type": true, "kind": true, "genre": true, "sort": true, "class": true,
	"form": true, "profession": true, "occupation": true, "occupations": true, "career": true, "job": true,
	"role": true, "sport": true, "instrument": true, "color": true, "colour": true, "position": true,
	"activity": true, "industry": true, "species": true, "breed": true, "field": true, "business": true}

// options returns the two alternatives of an "A or B" question.
func options(q string) []string {
	q = strings.TrimSuffix(strings.TrimSpace(q), "?")
	i := strings.LastIndex(q, " or ")
	if i < 0 {
		return nil
	}
	left, right := q[:i], q[i+4:]
	if c := strings.LastIndex(left, ","); c >= 0 {
		left = left[c+1:]
	}
	var out []string
	if es := entities(left, true); len(es) > 0 {
		out = append(out, es[len(es)-1])
	} else if ws := words(left); len(ws) > 0 {
		out = append(out, ws[len(ws)-1])
	}
	if es := entities(right, false); len(es) > 0 {
		out = append(out, es[0])
	} else if r := sanitize(right); r != "" && len(strings.Fields(r)) <= 4 {
		out = append(out, r)
	}
	return out
}

// occurrence is one place an answer candidate was found: its features
// there (answerFeatures keeps the strongest over all places).
type occurrence struct {
	rank      int // the passage's rank, -1 outside passages
	title     bool
	latest    bool
	typeMatch bool
	option    bool
	// read: the evidence to recognise the span as the answer has been
	// read (a passage holds it; for an option or yes/no, passages name
	// every option or question entity).
	read bool
	// prox, queryTitle, querySent, context and lead are the
	// PAnswerProximity, PAnswerQueryTitle, PAnswerQuerySentence,
	// PAnswerContext and PAnswerLead features at this place.
	prox, queryTitle, querySent, context, lead float64
}

// answerFeatures lists a turn state's answer candidates with their
// features: the spans of the passages read (latest block first), the
// options of an "A or B" question and yes/no once passages about the
// question were read, and, before any passage, the question's entities and
// "unknown".
func answerFeatures(st turnState) []featCand {
	qType := questionType(st.question)
	qWords, qStems := map[string]bool{}, map[string]bool{}
	for _, w := range contentWords(st.question) {
		qWords[w] = true
		qStems[stem(w)] = true
	}
	searched := map[string]bool{}
	for _, s := range st.searches {
		for _, w := range contentWords(s) {
			searched[w] = true
		}
	}
	byNorm := map[string]int{}
	var fcs []featCand
	var gold []bool // gold[i]: candidate i exact-matches a gold answer
	add := func(span string, o occurrence) {
		span = sanitize(span)
		n := normText(span)
		if n == "" {
			return
		}
		i, ok := byNorm[n]
		if !ok {
			if len(fcs) >= maxAnswerCands {
				return
			}
			phi := make([]float64, NumParams)
			sw := contentWords(span)
			// An option is in the question by construction: the two
			// features are about other spans.
			if len(sw) > 0 && !o.option {
				in, sr := 0, 0
				for _, w := range sw {
					if qWords[w] {
						in++
					}
					if searched[w] {
						sr++
					}
				}
				phi[PAnswerInQuestion] = float64(in) / float64(len(sw))
				phi[PAnswerSearched] = float64(sr) / float64(len(sw))
			}
			phi[PAnswerLength] = math.Min(float64(len(strings.Fields(span))), 8) / 4
			fcs = append(fcs, featCand{content: span, phi: phi})
			// Spans equal under normText are equal under the reward's
			// normalisation too: one test per candidate.
			gold = append(gold, len(st.golds) > 0 && format.ExactMatch(span, st.golds) == 1)
			i = len(fcs) - 1
			byNorm[n] = i
		}
		phi := fcs[i].phi
		if o.read && gold[i] {
			phi[PAnswerRecognised] = 1
		}
		if o.rank >= 0 {
			phi[PAnswerFrequency] = math.Min(phi[PAnswerFrequency]+1.0/3, 1)
			phi[PAnswerRank] = math.Max(phi[PAnswerRank], 1/float64(1+o.rank))
		}
		if o.title {
			phi[PAnswerTitle] = 1
		}
		if o.latest {
			phi[PAnswerLatest] = 1
		}
		if o.typeMatch {
			phi[PAnswerTypeMatch] = 1
		}
		if o.option {
			phi[PAnswerOption] = 1
		}
		phi[PAnswerProximity] = math.Max(phi[PAnswerProximity], o.prox)
		phi[PAnswerQueryTitle] = math.Max(phi[PAnswerQueryTitle], o.queryTitle)
		phi[PAnswerQuerySentence] = math.Max(phi[PAnswerQuerySentence], o.querySent)
		phi[PAnswerContext] = math.Max(phi[PAnswerContext], o.context)
		phi[PAnswerLead] = math.Max(phi[PAnswerLead], o.lead)
	}
	opts := options(st.question)
	if len(opts) == 2 && qType != "yesno" {
		// "A or B?": the answer is one of the options.
		qType = "option"
	}
	// The agent weighs an answer's type only against evidence it has read:
	// closed-book, it can only guess a question entity or admit it does not
	// know (below), so searching is what makes answers right. A yes/no
	// answer needs passages about an entity of the question, an option
	// passages that name it: passages about something else give no grounds
	// to compare. Recognising which one is right needs passages about all
	// of them.
	qEnts := questionEntityParts(st.question)
	norms := passageNorms(st.blocks)
	if len(st.blocks) > 0 {
		read := readText(norms)
		named := func(e string) bool {
			n := looseNorm(e)
			return n != "" && strings.Contains(read, " "+n+" ")
		}
		if qType == "yesno" {
			if slices.ContainsFunc(qEnts, named) {
				all := !slices.ContainsFunc(qEnts, func(e string) bool { return !named(e) })
				add("yes", occurrence{rank: -1, typeMatch: true, read: all})
				add("no", occurrence{rank: -1, typeMatch: true, read: all})
			}
		}
		all := len(opts) > 0 && !slices.ContainsFunc(opts, func(o string) bool { return !named(o) })
		for _, o := range opts {
			if named(o) {
				add(o, occurrence{rank: -1, typeMatch: qType == "option", option: true, read: all})
			}
		}
	}
	rel := relatedPassages(st.blocks, norms, qEnts, qStems)
	given := len(st.blocks) - len(st.searches)
	for bi := len(st.blocks) - 1; bi >= 0; bi-- {
		latest := bi == len(st.blocks)-1
		// The stems of the query that retrieved this block.
		qStemsB := map[string]bool{}
		if k := bi - given; k >= 0 && k < len(st.searches) {
			for _, w := range contentWords(st.searches[k]) {
				qStemsB[stem(w)] = true
			}
		}
		for di, d := range st.blocks[bi] {
			var qt float64
			if tw := contentWords(d.title); len(tw) > 0 {
				in := 0
				for _, w := range tw {
					if qStemsB[stem(w)] {
						in++
					}
				}
				qt = float64(in) / float64(len(tw))
			}
			add(d.title, occurrence{rank: d.rank, title: true, latest: latest, read: rel[bi][di], queryTitle: qt,
				typeMatch: qType == "entity" || qType == "person" && len(strings.Fields(d.title)) >= 2})
			for si, sent := range sentences(d.text) {
				sws := words(sent)
				cw := contentOf(sws)
				o := occurrence{rank: d.rank, latest: latest, read: rel[bi][di], queryTitle: qt,
					prox: proximity(cw, qStems), querySent: proximity(cw, qStemsB)}
				if si == 0 {
					o.lead = 1
				}
				for _, sp := range spans(sent, qType == "kind") {
					o := o
					o.title = normText(sp.text) == normText(d.title)
					o.typeMatch = typeMatches(qType, sp)
					o.context = contextOverlap(sws, words(sp.text), qStems)
					add(sp.text, o)
				}
			}
		}
	}
	if len(st.blocks) == 0 || len(fcs) == 0 {
		// Nothing retrieved yet: guess from the question itself.
		for _, e := range entities(st.question, true) {
			add(e, occurrence{rank: -1})
		}
		add("unknown", occurrence{rank: -1})
		// Without evidence the agent is inclined to admit it does not know.
		fcs[byNorm["unknown"]].fixed += unknownBoost
	}
	return fcs
}

// questionEntityParts are the entities of question q, each side of an
// "A and B" entity apart ("Are A and B both ...": A and B each).
func questionEntityParts(q string) []string {
	var es []string
	for _, e := range entities(q, true) {
		es = append(es, strings.Split(e, " and ")...)
	}
	return es
}

// docNorm is a passage's title and text loosely normalised (looseNorm).
type docNorm struct{ title, text string }

// passageNorms normalises every passage read once, for readText and
// relatedPassages.
func passageNorms(blocks [][]doc) [][]docNorm {
	out := make([][]docNorm, len(blocks))
	for bi, ds := range blocks {
		out[bi] = make([]docNorm, len(ds))
		for di, d := range ds {
			out[bi][di] = docNorm{looseNorm(d.title), looseNorm(d.text)}
		}
	}
	return out
}

// relatedPassages flags, for each passage read, whether the reader can
// tell it is about the question: it names one of the question's entity
// parts ents, or shares two content words (by stem) with it, or its title
// is named by a related passage read before it (the bridge of a multi-hop
// question). Only a related passage's spans can be recognised as the
// answer: a gold string in a passage about something else is not
// evidence. norms are passageNorms(blocks).
func relatedPassages(blocks [][]doc, norms [][]docNorm, ents []string, qStems map[string]bool) [][]bool {
	var padded []string
	for _, e := range ents {
		if n := looseNorm(e); n != "" {
			padded = append(padded, " "+n+" ")
		}
	}
	var seen strings.Builder // related passages' texts so far
	seen.WriteByte(' ')
	out := make([][]bool, len(blocks))
	for bi, ds := range blocks {
		out[bi] = make([]bool, len(ds))
		for di, d := range ds {
			title := " " + norms[bi][di].title + " "
			text := " " + norms[bi][di].text + " "
			r := norms[bi][di].title != "" && strings.Contains(seen.String(), title)
			for _, e := range padded {
				r = r || strings.Contains(title, e) || strings.Contains(text, e)
			}
			r = r || sharedStems(contentWords(d.title+" "+d.text), qStems) >= 2
			if r {
				out[bi][di] = true
				seen.WriteString(text)
			}
		}
	}
	return out
}

// readText is the loosely normalised text (padded with spaces) of every
// passage read, titles and texts, from passageNorms.
func readText(norms [][]docNorm) string {
	var b strings.Builder
	b.WriteByte(' ')
	for _, ds := range norms {
		for _, d := range ds {
			b.WriteString(d.title)
			b.WriteByte(' ')
			b.WriteString(d.text)
			b.WriteByte(' ')
		}
	}
	return b.String()
}

type span struct {
	text string
	kind string // cap, number, year, date
}

func typeMatches(qType string, sp span) bool {
	switch qType {
	case "year":
		return sp.kind == "year" || sp.kind == "date"
	case "number":
		return sp.kind == "number"
	case "person":
		return sp.kind == "cap" && len(strings.Fields(sp.text)) >= 2
	case "entity":
		return sp.kind == "cap"
	case "kind":
		return sp.kind == "isa"
	}
	return false
}

// sentences splits a passage into at most 12 sentences: a sentence ends at
// ".", "!" or "?" followed by a space (or the end), except after an
// initial ("H. L. Mencken") or a common abbreviation ("St. Louis").
func sentences(text string) []string {
	var out []string
	start := 0
	for i := 0; i < len(text) && len(out) < 12; i++ {
		c := text[i]
		if c != '.' && c != '!' && c != '?' {
			continue
		}
		if i+1 < len(text) && text[i+1] != ' ' && text[i+1] != '\n' {
			continue
		}
		if c == '.' && isAbbrev(text[start:i]) {
			continue
		}
		if sent := text[start : i+1]; strings.TrimSpace(sent) != "" {
			out = append(out, sent)
		}
		start = i + 1
	}
	if len(out) < 12 && strings.TrimSpace(text[start:]) != "" {
		out = append(out, text[start:])
	}
	return out
}

// abbrevs are the abbreviations whose "." does not end a sentence.
var abbrevs = map[string]bool{"mr": true, "mrs": true, "ms": true, "dr": true, "st": true, "jr": true,
	"sr": true, "mt": true, "vs": true, "no": true, "inc": true, "co": true, "ltd": true, "gen": true,
	"col": true, "lt": true, "adm": true, "rev": true, "sgt": true, "capt": true, "u.s": true, "ft": true}

// isAbbrev reports whether the text before a "." ends with an initial or
// an abbreviation, so that the "." does not end the sentence.
func isAbbrev(before string) bool {
	j := len(before)
	for j > 0 && before[j-1] != ' ' && before[j-1] != '(' && before[j-1] != '\n' {
		j--
	}
	w := before[j:]
	if len(w) == 1 && w[0] >= 'A' && w[0] <= 'Z' {
		return true
	}
	return abbrevs[strings.ToLower(w)]
}

// contextOverlap is the share of the question's content words (at most
// 3 counted) found within 4 words either side of the first occurrence
// of span sp in the sentence's words ws.
func contextOverlap(ws, sp []string, qWords map[string]bool) float64 {
	if len(sp) == 0 || len(qWords) == 0 {
		return 0
	}
	i := indexWords(ws, sp)
	if i < 0 {
		return 0
	}
	seen := map[string]bool{}
	for _, w := range append(slices.Clone(ws[max(0, i-4):i]), ws[i+len(sp):min(len(ws), i+len(sp)+4)]...) {
		if sw := stem(strings.ToLower(w)); qWords[sw] {
			seen[sw] = true
		}
	}
	return math.Min(float64(len(seen)), 3) / math.Min(float64(len(qWords)), 3)
}

// indexWords returns the index of the first occurrence of the word
// sequence sp in ws, or -1 (also for an empty sp).
func indexWords(ws, sp []string) int {
	if len(sp) == 0 {
		return -1
	}
	for i := 0; i+len(sp) <= len(ws); i++ {
		if slices.Equal(ws[i:i+len(sp)], sp) {
			return i
		}
	}
	return -1
}

// proximity is the share of the stems in stems that content words cw
// (contentOf a sentence) have.
func proximity(cw []string, stems map[string]bool) float64 {
	if len(stems) == 0 {
		return 0
	}
	return float64(sharedStems(cw, stems)) / float64(len(stems))
}

// sharedStems counts the distinct stems of content words cw in stems.
func sharedStems(cw []string, stems map[string]bool) int {
	seen := map[string]bool{}
	for _, w := range cw {
		if sw := stem(w); stems[sw] {
			seen[sw] = true
		}
	}
	return len(seen)
}

// stemSame maps words whose relation a reader sees but a five-letter stem
// does not to one stem.
var stemSame = map[string]string{"born": "birth", "wrote": "write", "written": "write", "writer": "write",
	"wife": "marri", "husband": "marri", "spouse": "marri", "married": "marri", "starring": "star",
	"starred": "star", "stars": "star", "died": "death", "dead": "death", "sang": "sing", "sung": "sing",
	"singer": "sing", "made": "make", "built": "build", "founded": "found", "founder": "found"}

// stem is a crude stem of a lower-case word: its first five letters
// ("directed" and "director" give "direc"), or stemSame's.
func stem(w string) string {
	if s, ok := stemSame[w]; ok {
		return s
	}
	if len(w) > 5 {
		return w[:5]
	}
	return w
}

// spans extracts answer-like spans from a sentence: dates, years, numbers
// and capitalised phrases (and each side of a phrase joined by "and":
// "Mark Neveldine and Brian Taylor" gives both names too). With kinds, it also
// gives the noun phrases that say what something is ("is an American
// journalist" gives "American journalist" and "journalist"), for questions
// that ask what kind of thing an answer is.
func spans(sent string, kinds bool) []span {
	ws := words(sent)
	var out []span
	for i := 0; i < len(ws); i++ {
		w := ws[i]
		switch {
		case months[strings.ToLower(w)] && i+2 < len(ws) && isNumber(ws[i+1]) && isYear(ws[i+2]):
			out = append(out, span{w + " " + ws[i+1] + ", " + ws[i+2], "date"})
			out = append(out, span{ws[i+2], "year"})
			i += 2
		case isYear(w):
			out = append(out, span{w, "year"})
		case isNumber(w):
			out = append(out, span{w, "number"})
		}
	}
	// A name does not run across punctuation: "Frank Lowy, Ben Buckley".
	for ci, clause := range clauses(sent) {
		for i, e := range entities(clause, false) {
			if ci == 0 && i == 0 && len(strings.Fields(e)) == 1 && strings.HasPrefix(strings.TrimSpace(sent), e) && stopWords[strings.ToLower(e)] {
				continue
			}
			if months[strings.ToLower(e)] {
				continue
			}
			out = append(out, span{e, "cap"})
			if l, r, ok := strings.Cut(e, " and "); ok {
				out = append(out, span{l, "cap"}, span{r, "cap"})
			}
			if t, rest, ok := strings.Cut(e, " "); ok && honorifics[strings.ToLower(t)] {
				out = append(out, span{rest, "cap"})
			}
		}
		if kinds {
			out = append(out, isaSpans(words(clause))...)
		}
	}
	return out
}

// honorifics may open a name; the name without one is a span too
// ("Dr Ulf Merbold" gives "Ulf Merbold").
var honorifics = map[string]bool{"dr": true, "mr": true, "mrs": true, "ms": true, "sir": true, "dame": true,
	"lord": true, "lady": true, "king": true, "queen": true, "prince": true, "princess": true, "saint": true}

// clauses splits a sentence at commas, semicolons, colons, parentheses
// and quotes.
func clauses(sent string) []string {
	return strings.FieldsFunc(sent, func(r rune) bool {
		return r == ',' || r == ';' || r == ':' || r == '(' || r == ')' || r == '"'
	})
}

// isaLinks introduce what something is; isaStops end the noun phrase.
var (
	isaLinks = map[string]bool{"is": true, "was": true, "are": true, "were": true, "as": true}
	isaDets  = map[string]bool{"a": true, "an": true, "the": true}
	isaStops = map[string]bool{"that": true, "who": true, "which": true, "from": true, "in": true, "of": true,
		"by": true, "with": true, "for": true, "and": true, "based": true, "known": true, "best": true,
		"on": true, "at": true, "to": true, "whose": true, "where": true, "founded": true, "born": true}
)

// isaSpans returns, for each "is a|an|the X" (or "was", "are", "were",
// "as") in words ws, the noun phrase X (at most 4 words, up to a stop
// word) and, when it starts with capitalised or numeric words, its
// lower-case tail and its last word.
func isaSpans(ws []string) []span {
	var out []span
	for i := 0; i+1 < len(ws); i++ {
		if !isaLinks[strings.ToLower(ws[i])] {
			continue
		}
		j := i + 1
		if isaDets[strings.ToLower(ws[j])] {
			j++
		}
		k := j
		for k < len(ws) && k-j < 4 && !isaStops[strings.ToLower(ws[k])] {
			k++
		}
		if k == j {
			continue
		}
		phrase := ws[j:k]
		out = append(out, span{strings.Join(phrase, " "), "isa"})
		t := 0
		for t < len(phrase) && (isCap(phrase[t]) || isNumber(phrase[t])) {
			t++
		}
		if t > 0 && t < len(phrase) {
			out = append(out, span{strings.Join(phrase[t:], " "), "isa"})
		}
		if len(phrase)-t > 1 {
			out = append(out, span{phrase[len(phrase)-1], "isa"})
		}
	}
	return out
}

// turnModel is the distribution over the tokens of one turn: the mixture
// of the answer candidates and the search branch, mixed with the uniform
// floor eps over the vocabulary.
type turnModel struct {
	turnParts
	eps   float64
	vocab int
	eos   int
	// memoPartial and memoPaths are the last paths computed: sampling
	// asks for the next-token distribution, then for the drawn token's
	// logprob, at the same partial turn. A turnModel is used by one
	// goroutine (its search branch caches word distributions too).
	memoPartial []int
	memoPaths   []turnPath
	memoOK      bool
}

func newTurnModel(parts turnParts, eps float64, vocab, eos int) *turnModel {
	return &turnModel{turnParts: parts, eps: eps, vocab: vocab, eos: eos}
}

// turnPath is one way the turn can continue after a partial turn: an answer
// candidate, the search header, or a choice of the query's current word
// (and, when that word is complete, of the next one). logp is the log
// probability of the whole path; its gradient is base plus the gradients
// of the word choices d1[i1] and d2[i2] (each nil when absent).
type turnPath struct {
	logp   float64
	next   int
	base   []float64
	hist   *queryHist
	d1, d2 *wordDist
	i1, i2 int
}

// addGrad adds f times the path's gradient to grad.
func (p *turnPath) addGrad(grad []float64, f float64) {
	for j, g := range p.base {
		grad[j] += f * g
	}
	if p.hist != nil {
		for k, d := range p.hist.dists {
			d.addGrad(grad, p.hist.words[k], f)
		}
	}
	if p.d1 != nil {
		p.d1.addGrad(grad, p.i1, f)
	}
	if p.d2 != nil {
		p.d2.addGrad(grad, p.i2, f)
	}
}

// paths lists the continuations alive after partial. The slice is
// shared with the next call for the same partial: do not modify it.
func (m *turnModel) paths(partial []int) []turnPath {
	if m.memoOK && slices.Equal(m.memoPartial, partial) {
		return m.memoPaths
	}
	var ps []turnPath
	for i := range m.answers {
		c := &m.answers[i]
		if !hasPrefix(c.ids, partial) {
			continue
		}
		next := m.eos
		if len(c.ids) > len(partial) {
			next = c.ids[len(partial)]
		}
		ps = append(ps, turnPath{logp: c.logp, next: next, base: c.grad})
	}
	if m.search != nil {
		ps = m.search.paths(partial, m.eos, ps)
	}
	m.memoPartial = append(m.memoPartial[:0], partial...)
	m.memoPaths, m.memoOK = ps, true
	return ps
}

func maxLogp(ps []turnPath) float64 {
	mx := math.Inf(-1)
	for i := range ps {
		mx = math.Max(mx, ps[i].logp)
	}
	return mx
}

// nextDist returns the structured distribution over the next token after
// partial (mass per token id, summing to 1), without the epsilon floor.
func (m *turnModel) nextDist(partial []int) map[int]float64 {
	ps := m.paths(partial)
	mx := maxLogp(ps)
	mass := map[int]float64{}
	total := 0.0
	for _, p := range ps {
		w := math.Exp(p.logp - mx)
		mass[p.next] += w
		total += w
	}
	if total == 0 {
		return map[int]float64{m.eos: 1}
	}
	for k := range mass {
		mass[k] /= total
	}
	return mass
}

// logProb is the exact log probability of token x after partial, with the
// epsilon floor, and (when grad is non-nil) adds its gradient to grad scaled
// by weight.
func (m *turnModel) logProb(partial []int, x int, grad []float64, weight float64) float64 {
	ps := m.paths(partial)
	mx := maxLogp(ps)
	var wAlive, wX float64
	for _, p := range ps {
		w := math.Exp(p.logp - mx)
		wAlive += w
		if p.next == x {
			wX += w
		}
	}
	var pst float64
	switch {
	case wAlive == 0 && x == m.eos:
		pst = 1
	case wAlive > 0:
		pst = wX / wAlive
	}
	p := (1-m.eps)*pst + m.eps/float64(m.vocab)
	if grad != nil && wAlive > 0 && wX > 0 {
		// d log p = (1-eps) ps / p * (E_{S_x}[g] - E_{alive}[g])
		f := weight * (1 - m.eps) * pst / p
		for i := range ps {
			w := math.Exp(ps[i].logp - mx)
			coef := -w / wAlive
			if ps[i].next == x {
				coef += w / wX
			}
			if coef != 0 {
				ps[i].addGrad(grad, f*coef)
			}
		}
	}
	return math.Log(p)
}

func hasPrefix(ids, prefix []int) bool {
	if len(prefix) > len(ids) {
		return false
	}
	for i, v := range prefix {
		if ids[i] != v {
			return false
		}
	}
	return true
}

func dot(a, b []float64) float64 {
	s := 0.0
	for i := range b {
		if i < len(a) {
			s += a[i] * b[i]
		}
	}
	return s
}

func scale(v []float64, f float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = x * f
	}
	return out
}

func sigmoid(z float64) float64 { return 1 / (1 + math.Exp(-z)) }

func logSigmoid(z float64) float64 {
	if z < 0 {
		return z - math.Log1p(math.Exp(z))
	}
	return -math.Log1p(math.Exp(-z))
}

func logSumExp(xs []float64) float64 {
	m := math.Inf(-1)
	for _, x := range xs {
		m = math.Max(m, x)
	}
	s := 0.0
	for _, x := range xs {
		s += math.Exp(x - m)
	}
	return m + math.Log(s)
}

// sortedKeys returns map keys in increasing order (deterministic sampling).
func sortedKeys(m map[int]float64) []int {
	ks := make([]int, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	return ks
}
