package orchestrator

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"text/template"
	"unicode"
	"unicode/utf8"

	"github.com/hindsearch/hindsearch/clients/judge"
	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/orchestrator/metrics"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/orchestrator/rollout"
	"github.com/hindsearch/hindsearch/recipes"
)

// DefaultJudgePrompt is the judge prompt template shipped for a 7B-class
// instruct judge (recipe key hindsight.prompt). It is a Go text/template
// with .Question, .Golds (empty in the no-gold ablation) and .Trajectory.
// It asks for guidance on what to search, not for the answer. The embedded
// simulated judge reads its "Question:", "Gold answer(s):" and
// "Trajectory:" lines, so keep those if you change it and use the simulator.
const DefaultJudgePrompt = `You review the work of a search agent that answers questions by issuing search queries to a Wikipedia search engine. Its final answer was wrong.

Question: {{.Question}}
{{- if .Golds}}
Gold answer(s): {{join .Golds " | "}}
{{- end}}
Trajectory:
{{.Trajectory}}

Write a short, directive critique of the agent's search behaviour, in at most three sentences: say what it should have searched for instead, quoting the exact search query in double quotes. Do not state the answer itself.`

// DefaultJudgePromptEarliest is the default judge prompt under
// hindsight.broadcast earliest: DefaultJudgePrompt, then the request for a
// first line "Step N" naming the first search that went wrong
// (FirstWrongSearch reads it). A custom hindsight.prompt must ask for the
// same line.
const DefaultJudgePromptEarliest = DefaultJudgePrompt + `

Start your reply with a line of the form "Step N", N being the number of the first search that went wrong (the agent's search queries counted from 1 in the order it issued them), then write the critique on the next lines.`

// reStep is a critique's first line naming a search: "Step 2", "**Step
// 2.**", "step 2:".
var reStep = regexp.MustCompile(`(?i)^[\s*#]*step\s*(\d{1,3})\s*[.:)]?[\s*]*$`)

// FirstWrongSearch reads a critique under hindsight.broadcast earliest:
// the search its first line names ("Step N", 1-based; 0 when the first
// line names none) and the critique after that line.
func FirstWrongSearch(critique string) (step int, rest string) {
	first, after, _ := strings.Cut(strings.TrimSpace(critique), "\n")
	m := reStep.FindStringSubmatch(strings.TrimSpace(first))
	if m == nil {
		return 0, critique
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return 0, critique
	}
	return n, strings.TrimSpace(after)
}

// earliestMask marks the search tokens of t's step-th search turn
// (1-based); ok is false when t has no such turn.
func earliestMask(t *rollout.Trajectory, step int) (mask []bool, ok bool) {
	k := 0
	for _, tr := range t.Turns {
		if tr.Action != format.ActionSearch {
			continue
		}
		if k++; k != step {
			continue
		}
		mask = make([]bool, len(t.Tokens))
		for j := tr.From; j < tr.To && j < len(t.Search); j++ {
			mask[j] = t.Search[j]
		}
		return mask, true
	}
	return nil, false
}

// JudgeSystem is the system message sent with every critique request.
const JudgeSystem = "You are a concise, exacting reviewer of search agents. You give directive advice about what to search for; you never reveal answers."

// judgeData is the judge template's input.
type judgeData struct {
	Question   string
	Golds      []string
	Trajectory string
}

// ParseJudgePrompt parses a judge prompt template.
func ParseJudgePrompt(text string) (*template.Template, error) {
	if text == "" {
		text = DefaultJudgePrompt
	}
	t, err := template.New("judge").Option("missingkey=error").Funcs(template.FuncMap{"join": strings.Join}).Parse(text)
	if err != nil {
		return nil, fmt.Errorf("hindsight.prompt: %w", err)
	}
	// A reference to an unknown field parses but fails on every execution,
	// which would silently turn every critique into a failure: try it now.
	if err := t.Execute(io.Discard, judgeData{Question: "q?", Golds: []string{"g"}, Trajectory: "t"}); err != nil {
		return nil, fmt.Errorf("hindsight.prompt: %w", err)
	}
	return t, nil
}

// JudgePrompt renders the judge prompt for a failed trajectory; golds is
// nil in the no-gold ablation.
func JudgePrompt(t *template.Template, question string, golds []string, response string) (string, error) {
	var b bytes.Buffer
	err := t.Execute(&b, judgeData{Question: format.NormalizeQuestion(question), Golds: golds, Trajectory: strings.TrimSpace(response)})
	if err != nil {
		return "", fmt.Errorf("hindsight.prompt: %w", err)
	}
	return b.String(), nil
}

// RedactGold replaces every verbatim occurrence of a gold answer in a
// critique (case-insensitive, on word boundaries) with "[answer]". Yes/no
// answers and one-character answers are left alone: they are ordinary words.
func RedactGold(critique string, golds []string) string {
	for _, g := range golds {
		g = strings.TrimSpace(g)
		n := strings.ToLower(g)
		if utf8.RuneCountInString(g) < 2 || n == "yes" || n == "no" {
			continue
		}
		re, err := regexp.Compile(`(?i)` + regexp.QuoteMeta(g))
		if err != nil {
			continue
		}
		// The boundaries are checked by hand rather than matched, so that
		// occurrences one separator apart ("Paris Paris") are all found.
		var b strings.Builder
		pos := 0
		for pos <= len(critique) {
			m := re.FindStringIndex(critique[pos:])
			if m == nil {
				break
			}
			start, end := pos+m[0], pos+m[1]
			if wordBoundary(critique, start, end) {
				b.WriteString(critique[pos:start])
				b.WriteString("[answer]")
				pos = end
				continue
			}
			_, size := utf8.DecodeRuneInString(critique[start:])
			b.WriteString(critique[pos : start+size])
			pos = start + size
		}
		if pos < len(critique) {
			b.WriteString(critique[pos:])
		}
		critique = b.String()
	}
	return critique
}

// wordBoundary says whether s[start:end] is neither preceded nor followed by
// a letter or a number.
func wordBoundary(s string, start, end int) bool {
	isWord := func(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) }
	if r, _ := utf8.DecodeLastRuneInString(s[:start]); start > 0 && isWord(r) {
		return false
	}
	if r, _ := utf8.DecodeRuneInString(s[end:]); end < len(s) && isWord(r) {
		return false
	}
	return true
}

// checkCritique says why a critique cannot be used ("" when it can).
func checkCritique(c string, maxChars int) string {
	c = strings.TrimSpace(c)
	switch {
	case c == "":
		return "empty critique"
	case utf8.RuneCountInString(c) > maxChars:
		return fmt.Sprintf("critique of %d characters is over hindsight.max_critique_chars (%d)", utf8.RuneCountInString(c), maxChars)
	case strings.Contains(c, "<search>") || strings.Contains(c, "<answer>") || strings.Contains(c, "<information>"):
		return "malformed critique: it contains agent tags"
	case !strings.ContainsFunc(c, func(r rune) bool { return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' }):
		return "malformed critique: no words"
	}
	return ""
}

// hinter runs the hindsight step for failed trajectories.
type hinter struct {
	judge     judge.Judge
	prompt    *template.Template
	maxTokens int
	sampling  judge.Sampling
	seed      int64
	gold      bool
	redact    bool
	maxChars  int
	hint      string // template with {critique}
	// siblings builds hints from the group (hindsight.hint siblings) with
	// siblingsTmpl, instead of asking the judge.
	siblings     bool
	siblingsTmpl string
	loss         string
	broadcast    string
	coef, clamp  float64
	phases       *metrics.Phases
}

// critique asks the judge about a failed trajectory. A judge error is
// returned; an unusable critique is reported through reason.
func (h *hinter) critique(ctx context.Context, t *rollout.Trajectory) (critique, reason string, err error) {
	var golds []string
	if h.gold {
		golds = t.Question.Golds
	}
	p, err := JudgePrompt(h.prompt, t.Question.Question, golds, t.Response)
	if err != nil {
		return "", "", err
	}
	seed := roles.Seed(h.seed, int64(t.Step), int64(t.Group), int64(t.Sample), 7)
	done := h.phases.Start("judge")
	c, err := h.judge.Chat(ctx, judge.ChatRequest{Messages: []judge.Message{{Role: "system", Content: JudgeSystem}, {Role: "user", Content: p}},
		MaxTokens: h.maxTokens, Sampling: h.sampling, Seed: &seed})
	done()
	if err != nil {
		return "", "", fmt.Errorf("judge critique: %w", err)
	}
	if h.broadcast == recipes.BroadcastEarliest {
		// The named step is kept whether or not it is in range: hindsightOne
		// decides, and counts the misses.
		t.FirstWrongSearch, c = FirstWrongSearch(c)
	}
	if why := checkCritique(c, h.maxChars); why != "" {
		return c, why, nil
	}
	c = strings.TrimSpace(c)
	if h.redact {
		c = RedactGold(c, t.Question.Golds)
	}
	return c, "", nil
}

// SiblingsHint is the judge-free hint of trajectory self (hindsight.hint
// siblings): tmpl with {siblings} replaced by one line per other
// trajectory of its group, in sample order, its search queries in order
// and whether it was Correct (reward above 0) or Incorrect, e.g.
//
//   - Correct: "founder of Acme" then "Jane Doe birthplace"
//   - Incorrect: no search
//
// No answer and no gold text is shown; a query may hold the gold, which
// the hinter redacts as it does critiques.
func SiblingsHint(tmpl string, group []*rollout.Trajectory, self *rollout.Trajectory) string {
	var lines []string
	for _, s := range group {
		if s == self {
			continue
		}
		verdict := "Incorrect"
		if s.Reward > 0 {
			verdict = "Correct"
		}
		var qs []string
		for _, tr := range s.Turns {
			if tr.Action == format.ActionSearch {
				qs = append(qs, strconv.Quote(tr.Content))
			}
		}
		searched := "no search"
		if len(qs) > 0 {
			searched = strings.Join(qs, " then ")
		}
		lines = append(lines, "- "+verdict+": "+searched)
	}
	return strings.ReplaceAll(tmpl, recipes.SiblingsPlaceholder, strings.Join(lines, "\n"))
}

// siblingsHint is t's siblings hint among group, or why it cannot be used
// (the critique's checks: its length cap), gold-redacted as critiques are.
func (h *hinter) siblingsHint(t *rollout.Trajectory, group []*rollout.Trajectory) (hint, reason string) {
	c := strings.TrimSpace(SiblingsHint(h.siblingsTmpl, group, t))
	if why := checkCritique(c, h.maxChars); why != "" {
		return c, why
	}
	if h.redact {
		c = RedactGold(c, t.Question.Golds)
	}
	return c, ""
}

// hintText formats the critique for the teacher context.
func (h *hinter) hintText(critique string) string {
	return strings.ReplaceAll(h.hint, "{critique}", critique)
}

// scoredLen is how many of t's response tokens need a teacher score: all
// of them, or with the term on search tokens only (or no term) those up to
// the last search token, since the tokens after it are not sent.
func (h *hinter) scoredLen(t *rollout.Trajectory) int {
	if h.broadcast != recipes.BroadcastSearch && h.broadcast != recipes.BroadcastEarliest && h.loss != recipes.HindsightLossNone {
		return len(t.Tokens)
	}
	for i := len(t.Search) - 1; i >= 0; i-- {
		if t.Search[i] {
			return i + 1
		}
	}
	return 0
}

// rescore scores t's response tokens in the student's own context (its
// prompt, no hint) with model on p, through the same prefill route as the
// teacher (hindsight.student_logprobs rescored). It returns logprobs for
// every response token: the prefill ones for the scored tokens, the
// sampling ones for the unscored tail (where the term is 0 anyway).
func (h *hinter) rescore(ctx context.Context, t *rollout.Trajectory, p policy.Policy, model string) ([]float64, error) {
	n := h.scoredLen(t)
	if n == 0 {
		return t.Logprobs, nil
	}
	return h.scoreResponse(ctx, p, model, t.PromptIDs, t, n, t.Logprobs, "rescore", "student rescore")
}

// scoreResponse scores prompt followed by t's first n response tokens
// with model on p (the prefill route), timed as phase, and returns the
// response tokens' logprobs: the scored ones, then tail's for the unscored
// rest. Errors start with what.
func (h *hinter) scoreResponse(ctx context.Context, p policy.Policy, model string, prompt []int, t *rollout.Trajectory, n int, tail []float64, phase, what string) ([]float64, error) {
	seq := append(append(make([]int, 0, len(prompt)+n), prompt...), t.Tokens[:n]...)
	done := h.phases.Start(phase)
	lps, err := p.Score(ctx, model, seq)
	done()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if len(lps) != len(seq) {
		return nil, fmt.Errorf("%s: %d logprobs for %d tokens", what, len(lps), len(seq))
	}
	return append(lps[len(prompt):], tail[n:]...), nil
}

// opd scores the trajectory's response tokens under the teacher context and
// returns the per-token OPD term after the loss form and broadcast, against
// the student logprobs student (t.Logprobs, the sampling ones, or those of
// rescore).
func (h *hinter) opd(ctx context.Context, t *rollout.Trajectory, teacherPrompt []int, p policy.Policy, teacherModel string, student []float64) ([]float64, error) {
	n := h.scoredLen(t)
	if n == 0 {
		return make([]float64, len(t.Tokens)), nil
	}
	// Unscored tails are the student's own logprobs: a difference of 0.
	teacher, err := h.scoreResponse(ctx, p, teacherModel, teacherPrompt, t, n, student, "teacher", "teacher score")
	if err != nil {
		return nil, err
	}
	if h.broadcast == recipes.BroadcastEarliest {
		mask, ok := earliestMask(t, t.FirstWrongSearch)
		if !ok {
			return nil, fmt.Errorf("%s", errNoStep)
		}
		return OPDTerm(teacher, student, t.Policy, mask, h.loss, recipes.BroadcastSearch, h.clamp), nil
	}
	return OPDTerm(teacher, student, t.Policy, t.Search, h.loss, h.broadcast, h.clamp), nil
}

// errNoStep is the CritiqueError of a critique under hindsight.broadcast
// earliest that names no search of its trajectory: no term, counted as
// earliest_unnamed, never fatal.
const errNoStep = "the critique names no search of this trajectory (hindsight.broadcast earliest wants a first line \"Step N\"): no term"

// OPDTerm computes the per-token on-policy-distillation term from teacher
// and student (sampling) logprobs of the response tokens. loss is clamp
// (clamp(lt-ls, 0, c)), reverse_kl (clamp(lt-ls, -c, c)) or none (zeros);
// broadcast is search (the term on the tokens isSearch marks only: the
// search tokens, or under broadcast earliest one turn's), response (on
// every policy token) or trajectory (the mean over policy tokens, on every
// policy token). Environment tokens always get 0.
func OPDTerm(teacher, student []float64, isPolicy, isSearch []bool, loss, broadcast string, c float64) []float64 {
	d := make([]float64, len(teacher))
	if loss == "none" {
		return d
	}
	sum, n := 0.0, 0
	for i := range teacher {
		if !isPolicy[i] {
			continue
		}
		diff := teacher[i] - student[i]
		switch loss {
		case "reverse_kl":
			diff = math.Max(-c, math.Min(c, diff))
		default:
			diff = math.Max(0, math.Min(c, diff))
		}
		d[i] = diff
		sum += diff
		n++
	}
	switch broadcast {
	case "search":
		for i := range d {
			if !isSearch[i] {
				d[i] = 0
			}
		}
	case "trajectory":
		mean := 0.0
		if n > 0 {
			mean = sum / float64(n)
		}
		for i := range d {
			if isPolicy[i] {
				d[i] = mean
			}
		}
	}
	return d
}
