package lm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
)

// Judge is the simulated judge model. It reads the orchestrator's critique
// prompt (the "Question:", optional "Gold answer(s):" and "Trajectory:"
// sections of the default template) and writes a short, directive critique
// of the search behaviour. With the gold answers it can look through the
// corpus for a passage that holds an answer and tell the agent what to
// search for; without them it can only suggest a question entity the agent
// has not searched yet, so its critiques are less useful, as the method's
// ablation expects. It is safe for concurrent use.
type Judge struct {
	corpus []judgePassage
	// words maps each word of the corpus to the passages holding it, so a
	// gold answer is looked up among the passages of its rarest word.
	words map[string][]int32
}

type judgePassage struct {
	title string
	norm  string // " " + lowercase words + " "
}

// NewJudge returns the simulated judge model over corpus (the wiki-18
// contents strings, each a quoted title line then the text), the passages
// in which it looks for one holding a gold answer.
func NewJudge(corpus []string) *Judge {
	jg := &Judge{words: map[string][]int32{}}
	for i, c := range corpus {
		title := c
		if j := strings.IndexByte(c, '\n'); j >= 0 {
			title = c[:j]
		}
		norm := looseNorm(c)
		jg.corpus = append(jg.corpus, judgePassage{title: strings.Trim(title, "\" "), norm: " " + norm + " "})
		seen := map[string]bool{}
		for _, w := range strings.Fields(norm) {
			if !seen[w] {
				seen[w] = true
				jg.words[w] = append(jg.words[w], int32(i))
			}
		}
	}
	return jg
}

// judgeInput is what the simulated judge reads from the critique prompt.
type judgeInput struct {
	question   string
	golds      []string
	searches   []string
	titles     map[string]bool
	trajectory string
	// found are the titles retrieved after each search, in search order
	// (the <information> block between it and the next search).
	found []map[string]bool
	// askStep says the prompt asks for a first line "Step N" (the
	// orchestrator's prompt under hindsight.broadcast earliest).
	askStep bool
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
	in.askStep = strings.Contains(p+traj, `"Step N"`)
	ss := reSearch.FindAllStringSubmatchIndex(traj, -1)
	infos := reInfo.FindAllStringSubmatchIndex(traj, -1)
	for i, m := range ss {
		in.searches = append(in.searches, normText(traj[m[2]:m[3]]))
		next := len(traj)
		if i+1 < len(ss) {
			next = ss[i+1][0]
		}
		found := map[string]bool{}
		for _, f := range infos {
			if f[0] >= m[1] && f[0] < next {
				for _, d := range parseDocs(traj[f[2]:f[3]]) {
					found[normText(d.title)] = true
				}
			}
		}
		in.found = append(in.found, found)
	}
	for _, m := range reInfo.FindAllStringSubmatch(traj, -1) {
		for _, d := range parseDocs(m[1]) {
			in.titles[normText(d.title)] = true
		}
	}
	return in
}

// Critique returns the simulated judge's greedy critique for one prompt:
// the most likely of Critiques, what Sample draws with greedy settings.
func (j *Judge) Critique(prompt string) string {
	return j.Critiques(prompt)[0]
}

// judgeLogits are the logits of the simulated judge's candidate critiques,
// most likely first (the judge is unsure: at Qwen2.5 instruct's default
// temperature 0.7 and top_p 0.8 it writes the second one about a third of
// the time).
var judgeLogits = []float64{1, 0.5, 0}

// Sample draws one of prompt's Critiques with sp and rng, as vLLM would
// sample a judge model whose candidate completions have the logits 1, 0.5
// then 0 (judgeLogits): greedy sp takes the first and draws nothing from
// rng; the repetition penalty applies to every candidate (each is made of
// words of the prompt, which holds the question, the titles and the
// instructions it quotes); the presence and frequency penalties have
// nothing to act on in a one-step choice.
func (j *Judge) Sample(prompt string, sp Sampling, rng *rand.Rand) string {
	cs := j.Critiques(prompt)
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
// generic advice (each once). When the prompt asks for a first line
// "Step N" (hindsight.broadcast earliest), each starts with the search it
// knows to be the first miss.
func (j *Judge) Critiques(prompt string) []string {
	in := parseJudgePrompt(prompt)
	out := j.critiques(in)
	if in.askStep {
		// The first search after which the gold passage was not in view;
		// without gold answers the judge cannot tell and names the first;
		// with every search right (or none made) it names none.
		title, step := j.goldPassage(in), 0
		for i := range in.searches {
			if title == "" || !in.found[i][normText(title)] {
				step = i + 1
				break
			}
		}
		for i := range out {
			out[i] = fmt.Sprintf("Step %d\n%s", step, out[i])
		}
	}
	return out
}

// critiques are Critiques without the "Step N" line.
func (j *Judge) critiques(in judgeInput) []string {
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
	title := j.goldPassage(in)
	if title != "" {
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
func (j *Judge) goldPassage(in judgeInput) string {
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
			if ps := j.words[w]; i == 0 || len(ps) < len(rarest) {
				rarest = ps
			}
		}
		cand = append(cand, rarest...)
	}
	slices.Sort(cand)
	cand = slices.Compact(cand)
	for _, pi := range cand {
		p := j.corpus[pi]
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
