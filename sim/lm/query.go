package lm

import (
	"math"
	"slices"
	"strings"
)

// A search query is composed word by word (issue 15). After the search
// header (the search thought and "<search>") the agent writes words, each
// drawn from a softmax over the words of its context (the question, the
// titles and the named entities of the passages it just read and, in a
// teacher context, the hint's quoted phrases), until it draws the end,
// " </search>" and the blank line after it. A word's logit is the learnable
// parameters times its features (what kind of question word it is, where in
// the passages it comes from, whether it continues a phrase of the context
// from the query's last word, whether the query or an earlier search has it)
// plus, only when a hint is in the context, the fixed boosts of agent.go's
// hint constants. The end's logit has its own features (a bias, the query's
// length, whether the last word ends a phrase of the context).
//
// Every word is written as " "+word with Qwen's ids, so each word's first
// token is the only one starting with a space byte (a word holds no
// whitespace), and the end's first token " </" cannot start a word (words
// hold no "<"). The token ids of a query therefore split into words in one
// way only: a chunk starts at every token whose bytes start with a space.
// That makes the token conditional exact without summing over
// segmentations: the completed chunks fix the words so far, and the
// current chunk is a prefix of the words still alive. A word's ids can be a
// prefix of another's (" Paris" and " Parisian"); at such a point the next
// token is either the longer word's next token or the first token of the
// word after the complete one, and both are counted.

// maxQueryWords caps a query's length: after this many words the end is
// the only choice.
const maxQueryWords = 8

// Caps on the words a query may draw from each source, so a turn's
// softmax stays small.
const (
	maxQuestionWords = 24
	maxTitleWords    = 16
	maxPassageWords  = 24
	maxBridgeWords   = 8
	passageEntities  = 4
)

// bridgeEntities are the entities a multi-hop question's next search may
// need: in the passages just read that are about the question
// (relatedPassages), the named entities that stand within four words of a
// relation word of the question (a content word of it outside its
// entities: "director" in "Where was the director of Beatrice born?"
// finds "Bertrand Tavernier" in "... a 1987 film directed by Bertrand
// Tavernier"), those not in the question and not a lone stop word
// ("She"), in passage order, each once.
// Nothing here reads the gold answers or a hint: it is what a reader sees
// in the text.
func bridgeEntities(st turnState) []string {
	n := len(st.blocks)
	if n == 0 {
		return nil
	}
	qEnts := questionEntityParts(st.question)
	entWords := map[string]bool{}
	for _, e := range qEnts {
		for _, w := range contentWords(e) {
			entWords[w] = true
		}
	}
	qStems, rel := map[string]bool{}, map[string]bool{}
	for _, w := range contentWords(st.question) {
		qStems[stem(w)] = true
		if !entWords[w] {
			rel[stem(w)] = true
		}
	}
	qNorm := " " + looseNorm(st.question) + " "
	related := relatedPassages(st.blocks, passageNorms(st.blocks), qEnts, qStems)[n-1]
	var out []string
	seen := map[string]bool{}
	for di, d := range st.blocks[n-1] {
		if !related[di] {
			continue
		}
		for _, sent := range sentences(d.text) {
			sws := words(sent)
			var at []int // positions of the question's relation words
			for i, w := range sws {
				if lw := strings.ToLower(w); !stopWords[lw] && rel[stem(lw)] {
					at = append(at, i)
				}
			}
			if len(at) == 0 {
				continue
			}
			for _, e := range entities(sent, false) {
				ne := looseNorm(e)
				if ne == "" || seen[ne] || len(contentWords(e)) == 0 || strings.Contains(qNorm, " "+ne+" ") {
					continue
				}
				ew := words(e)
				if i := indexWords(sws, ew); i >= 0 && slices.ContainsFunc(at, func(a int) bool { return a >= i-4 && a < i+len(ew)+4 }) {
					seen[ne] = true
					out = append(out, e)
				}
			}
		}
	}
	return out
}

// qword is one word of a turn's query vocabulary.
type qword struct {
	text string
	ids  []int
	// phi are the word's static features (question kind, source,
	// searched before); the dynamic ones are set per history.
	phi []float64
	// endsPhrase: the word ends a phrase of the context (an entity of the
	// question or a passage, or a title), for PQueryEndPhrase.
	endsPhrase bool
	// hint: the word is in one of the hint's quoted phrases.
	hint bool
}

// queryModel is a turn's search branch.
type queryModel struct {
	params Params
	space  func(id int) bool
	logPS  float64
	gS     []float64
	header []int // the search thought + "<search>"
	end    []int // " </search>" + searchTurnEnd
	words  []qword
	// byIDs maps a word's ids (idsKey) to its index; the end is
	// len(words).
	byIDs map[string]int
	// follows[prev] are the words that follow word prev in a phrase of
	// the context (the question, a title, an entity).
	follows []map[int]bool
	// hints are the hint's quoted phrases as word indices.
	hints [][]int
	dists map[string]*wordDist
}

// wordDist is the distribution of the next query word after a history of
// words: logp per word and (at len(words)) the end, -Inf where not
// allowed; phi the feature vectors, mean their expectation.
type wordDist struct {
	logp []float64
	phi  [][]float64
	mean []float64
}

// addGrad adds f times grad log p(word i) to grad.
func (d *wordDist) addGrad(grad []float64, i int, f float64) {
	if d.phi[i] == nil {
		return
	}
	for j, v := range d.phi[i] {
		grad[j] += f * (v - d.mean[j])
	}
}

// queryHist is the completed words of a partial query and the
// distribution each was drawn from.
type queryHist struct {
	words []int
	dists []*wordDist
}

// queryWords splits a phrase into query words: its whitespace-separated
// fields (after sanitize), trimmed of quotes and punctuation at both ends,
// keeping those with a letter or digit.
func queryWords(s string) []string {
	var out []string
	for _, f := range strings.Fields(sanitize(s)) {
		f = strings.Trim(f, "\"'?,.!;:()[]{}")
		if strings.IndexFunc(f, func(r rune) bool {
			return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r > 0x7f
		}) >= 0 {
			out = append(out, f)
		}
	}
	return out
}

func newQueryModel(st turnState, params Params, tk *Tokenizer, thought string) *queryModel {
	q := &queryModel{
		params: params,
		header: tk.encodeShared(thought + "<search>"),
		end:    tk.encodeShared(" </search>" + searchTurnEnd),
		byIDs:  map[string]int{},
		dists:  map[string]*wordDist{},
		space: func(id int) bool {
			b, ok := tk.TokenBytes(id)
			return ok && len(b) > 0 && b[0] == ' '
		},
	}
	byKey := map[string]int{}
	add := func(w string, feat int, limit *int) int {
		k := strings.ToLower(w)
		if i, ok := byKey[k]; ok {
			return i
		}
		if *limit <= 0 {
			return -1
		}
		ids := tk.encodeShared(" " + w)
		if len(ids) == 0 || !q.space(ids[0]) {
			return -1
		}
		for _, id := range ids[1:] {
			if q.space(id) {
				return -1
			}
		}
		if _, dup := q.byIDs[idsKey(ids)]; dup {
			return -1
		}
		*limit--
		phi := make([]float64, NumParams)
		if feat >= 0 {
			phi[feat] = 1
		}
		q.words = append(q.words, qword{text: w, ids: ids, phi: phi})
		q.follows = append(q.follows, nil)
		i := len(q.words) - 1
		byKey[k] = i
		q.byIDs[idsKey(ids)] = i
		return i
	}
	link := func(ix []int, phrase bool) {
		for j := 1; j < len(ix); j++ {
			if ix[j-1] >= 0 && ix[j] >= 0 {
				if q.follows[ix[j-1]] == nil {
					q.follows[ix[j-1]] = map[int]bool{}
				}
				q.follows[ix[j-1]][ix[j]] = true
			}
		}
		if phrase && len(ix) > 0 && ix[len(ix)-1] >= 0 {
			q.words[ix[len(ix)-1]].endsPhrase = true
		}
	}
	// The question: its entities' words, its other words.
	entity := map[string]bool{}
	qEntities := entities(st.question, true)
	for _, e := range qEntities {
		for _, w := range queryWords(e) {
			entity[strings.ToLower(w)] = true
		}
	}
	limit := maxQuestionWords
	var qix []int
	inQuestion, bridge := map[string]bool{}, map[string]bool{}
	for _, w := range queryWords(strings.TrimSuffix(st.question, "?")) {
		lw := strings.ToLower(w)
		inQuestion[lw] = true
		feat := PWordQContent
		switch {
		case stopWords[lw] || questionWords[lw]:
			feat = PWordQStop
		case entity[lw]:
			feat = PWordQEntity
		}
		qix = append(qix, add(w, feat, &limit))
	}
	link(qix, false)
	phraseIx := func(p string) []int {
		var ix []int
		for _, w := range queryWords(p) {
			i, ok := byKey[strings.ToLower(w)]
			if !ok {
				i = -1
			}
			ix = append(ix, i)
		}
		return ix
	}
	for _, e := range qEntities {
		link(phraseIx(e), true)
	}
	// The passages just read: their titles, then their named entities.
	if n := len(st.blocks); n > 0 {
		// A phrase of the passages: its words, linked, ending a phrase.
		addPhrase := func(p string, feat int, limit *int) {
			var ix []int
			for _, w := range queryWords(p) {
				ix = append(ix, add(w, feat, limit))
			}
			link(ix, true)
		}
		limit = maxTitleWords
		for _, d := range st.blocks[n-1] {
			addPhrase(d.title, PWordTitle, &limit)
		}
		// The bridge entities first (their own cap), so the query can
		// always name them.
		limit = maxBridgeWords
		for _, e := range bridgeEntities(st) {
			for _, w := range queryWords(e) {
				if lw := strings.ToLower(w); !inQuestion[lw] {
					bridge[lw] = true
				}
			}
			addPhrase(e, PWordPassage, &limit)
		}
		limit = maxPassageWords
		for _, d := range st.blocks[n-1] {
			for k, e := range entities(d.text, false) {
				if k >= passageEntities {
					break
				}
				addPhrase(e, PWordPassage, &limit)
			}
		}
	}
	// Words of earlier searches.
	searched := map[string]bool{}
	for _, s := range st.searches {
		for _, w := range queryWords(s) {
			searched[strings.ToLower(w)] = true
		}
	}
	for i := range q.words {
		lw := strings.ToLower(q.words[i].text)
		if searched[lw] {
			q.words[i].phi[PWordSearched] = 1
		}
		if bridge[lw] {
			q.words[i].phi[PWordBridge] = 1
		}
	}
	// The hint's quoted phrases: the teacher may copy their words (a word
	// only the hint has gets no learnable feature but PWordSearched).
	if st.hint != "" {
		limit = 4 * maxQueryWords
		for _, m := range reQuoted.FindAllStringSubmatch(st.hint, 2) {
			// A phrase every word of which earlier searches wrote is
			// done: the teacher follows a suggestion once.
			pw := queryWords(m[1])
			if !slices.ContainsFunc(pw, func(w string) bool { return !searched[strings.ToLower(w)] }) {
				continue
			}
			var ix []int
			for _, w := range pw {
				i := add(w, -1, &limit)
				if i >= 0 {
					q.words[i].hint = true
					if searched[strings.ToLower(w)] {
						q.words[i].phi[PWordSearched] = 1
					}
				}
				ix = append(ix, i)
			}
			if len(ix) > 0 && !slices.Contains(ix, -1) {
				q.hints = append(q.hints, ix)
			}
		}
	}
	return q
}

// idsKey packs ids into a string map key.
func idsKey(ids []int) string {
	if len(ids) == 0 {
		return ""
	}
	b := make([]byte, 0, 4*len(ids))
	for _, id := range ids {
		b = append(b, byte(id), byte(id>>8), byte(id>>16), byte(id>>24))
	}
	return string(b)
}

// idsOf returns the ids of word i (the end for len(words)).
func (q *queryModel) idsOf(i int) []int {
	if i == len(q.words) {
		return q.end
	}
	return q.words[i].ids
}

// dist returns the distribution of the word after hist (cached).
func (q *queryModel) dist(hist []int) *wordDist {
	key := idsKey(hist)
	if d, ok := q.dists[key]; ok {
		return d
	}
	n := len(q.words)
	d := &wordDist{logp: make([]float64, n+1), phi: make([][]float64, n+1), mean: make([]float64, NumParams)}
	for i := range d.logp {
		d.logp[i] = math.Inf(-1)
	}
	q.dists[key] = d
	if len(hist) >= maxQueryWords {
		d.logp[n] = 0
		return d
	}
	prev := -1
	used := map[int]bool{}
	if len(hist) > 0 {
		prev = hist[len(hist)-1]
	}
	for _, w := range hist {
		used[w] = true
	}
	// The hint phrases the query continues: word -> boost, and whether
	// the query ends with a whole phrase (the teacher then ends it).
	hintNext := map[int]bool{}
	hintDone := false
	for _, h := range q.hints {
		if endsWith(hist, h) {
			hintDone = true
		}
		for s := 0; s < len(h); s++ {
			// h[:s] matches the end of hist (s == 0: the query starts).
			if s == 0 && len(hist) > 0 {
				continue
			}
			if !endsWith(hist, h[:s]) {
				continue
			}
			hintNext[h[s]] = true
		}
	}
	logits := make([]float64, n+1)
	for i := range q.words {
		w := &q.words[i]
		phi := append([]float64(nil), w.phi...)
		if prev >= 0 && q.follows[prev][i] {
			phi[PWordNext] = 1
		}
		if used[i] {
			phi[PWordUsed] = 1
		}
		l := dot(q.params, phi)
		// The teacher writes each word of a suggested phrase once.
		if w.hint && !used[i] {
			l += hintWordBoost
			if hintNext[i] {
				l += hintNextBoost
			}
		}
		d.phi[i], logits[i] = phi, l
	}
	allowed := logits[:n]
	if len(hist) > 0 {
		phi := make([]float64, NumParams)
		phi[PQueryEnd] = 1
		phi[PQueryEndLen] = float64(len(hist)) / 3
		if q.words[prev].endsPhrase {
			phi[PQueryEndPhrase] = 1
		}
		l := dot(q.params, phi)
		if hintDone {
			l += hintEndBoost
		}
		d.phi[n], logits[n] = phi, l
		allowed = logits
	}
	if len(allowed) == 0 {
		return d
	}
	lse := logSumExp(allowed)
	for i := range allowed {
		d.logp[i] = allowed[i] - lse
		p := math.Exp(d.logp[i])
		for j, v := range d.phi[i] {
			d.mean[j] += p * v
		}
	}
	return d
}

func endsWith(s, suffix []int) bool {
	return len(suffix) <= len(s) && slices.Equal(s[len(s)-len(suffix):], suffix)
}

// paths appends to ps the search branch's continuations after partial.
func (q *queryModel) paths(partial []int, eos int, ps []turnPath) []turnPath {
	h := q.header
	if len(partial) < len(h) {
		if hasPrefix(h, partial) {
			ps = append(ps, turnPath{logp: q.logPS, next: h[len(partial)], base: q.gS})
		}
		return ps
	}
	if !hasPrefix(partial, h) {
		return ps
	}
	rest := partial[len(h):]
	n := len(q.words)
	if len(rest) == 0 {
		d := q.dist(nil)
		for i := 0; i < n; i++ {
			if !math.IsInf(d.logp[i], -1) {
				ps = append(ps, turnPath{logp: q.logPS + d.logp[i], next: q.words[i].ids[0], base: q.gS, d1: d, i1: i})
			}
		}
		return ps
	}
	hist := &queryHist{}
	lp := q.logPS
	start := 0
	for j := 1; j < len(rest); j++ {
		if !q.space(rest[j]) {
			continue
		}
		i, ok := q.byIDs[idsKey(rest[start:j])]
		if !ok {
			return ps
		}
		d := q.dist(hist.words)
		if math.IsInf(d.logp[i], -1) {
			return ps
		}
		lp += d.logp[i]
		hist.words = append(hist.words, i)
		hist.dists = append(hist.dists, d)
		start = j
	}
	cur := rest[start:]
	d := q.dist(hist.words)
	for i := 0; i <= n; i++ {
		ids := q.idsOf(i)
		if math.IsInf(d.logp[i], -1) || !hasPrefix(ids, cur) {
			continue
		}
		l := lp + d.logp[i]
		switch {
		case len(ids) > len(cur):
			ps = append(ps, turnPath{logp: l, next: ids[len(cur)], base: q.gS, hist: hist, d1: d, i1: i})
		case i == n:
			ps = append(ps, turnPath{logp: l, next: eos, base: q.gS, hist: hist, d1: d, i1: i})
		default:
			h2 := append(append(make([]int, 0, len(hist.words)+1), hist.words...), i)
			d2 := q.dist(h2)
			for k := 0; k <= n; k++ {
				if !math.IsInf(d2.logp[k], -1) {
					ps = append(ps, turnPath{logp: l + d2.logp[k], next: q.idsOf(k)[0], base: q.gS, hist: hist, d1: d, i1: i, d2: d2, i2: k})
				}
			}
		}
	}
	return ps
}
