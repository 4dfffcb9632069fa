// Package format is the Search-R1 agent format, byte-compatible with
// Search-R1 (PROTOCOLS.md §1): the prompt, the action parser, the
// <information> block, the invalid-action text, and the exact-match and F1
// scores with SQuAD normalisation.
package format

import (
	"regexp"
	"strings"
	"unicode"
)

// Instruction is Search-R1's instruction text, verbatim (typo included).
const Instruction = "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get new information. After reasoning, if you find you lack some knowledge, you can call a search engine by <search> query </search> and it will return the top searched results between <information> and </information>. You can search as many times as your want. If you find no further external knowledge needed, you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. For example, <answer> Beijing </answer>. "

// InvalidActionText is appended, verbatim, after a turn with no valid action.
const InvalidActionText = "\nMy previous action is invalid. If I want to search, I should put the query between <search> and </search>. If I want to give the final answer, I should put the answer between <answer> and </answer>. Let me try again.\n"

// StopStrings end a policy turn; the stop string is kept in the output.
var StopStrings = []string{"</search>", "</answer>"}

// NormalizeQuestion strips the question and appends "?" unless it already
// ends with one.
func NormalizeQuestion(q string) string {
	q = strings.TrimSpace(q)
	if !strings.HasSuffix(q, "?") {
		q += "?"
	}
	return q
}

// UserPrompt is the single user message of a trajectory: the instruction,
// then, when hint is non-empty, the hint text, then "Question: " and the
// normalised question and a newline. With an empty hint it is exactly
// Search-R1's prompt.
func UserPrompt(question, hint string) string {
	return Instruction + hint + "Question: " + NormalizeQuestion(question) + "\n"
}

// Action kinds.
const (
	ActionNone   = ""
	ActionSearch = "search"
	ActionAnswer = "answer"
)

// ParseAction returns the first action of a turn's text: the first match of
// <(search|answer)>(.*?)</\1>, content stripped. kind is ActionNone when
// the turn has no valid action.
func ParseAction(text string) (kind, content string) {
	kind, content, _, _ = ActionSpan(text)
	return kind, content
}

// InfoBlock formats retrieved passages the way Search-R1 does:
// "\n\n<information>" + docs + "</information>\n\n", docs being
// "Doc {i}(Title: {title}) {text}\n" per hit with the whole string stripped.
func InfoBlock(contents []string) string {
	var b strings.Builder
	for i, c := range contents {
		title, text := c, ""
		if j := strings.IndexByte(c, '\n'); j >= 0 {
			title, text = c[:j], c[j+1:]
		}
		b.WriteString("Doc ")
		b.WriteString(itoa(i + 1))
		b.WriteString("(Title: ")
		b.WriteString(title)
		b.WriteString(") ")
		b.WriteString(text)
		b.WriteString("\n")
	}
	return "\n\n<information>" + strings.TrimSpace(b.String()) + "</information>\n\n"
}

// SearchFailedBlock is the environment's answer to a search the retriever
// failed (after the transport's retries) when retriever.on_error is
// observe: an <information> block, shaped as InfoBlock's, that says so and
// holds no passage. Search-R1's own loop has no such answer (a failed
// retrieval request ends its run); this follows the tool loops that return
// a tool's failure to the model as its observation (verl's agent loop).
const SearchFailedBlock = "\n\n<information>The search failed: no passages were returned.</information>\n\n"

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var d []byte
	for i > 0 {
		d = append([]byte{byte('0' + i%10)}, d...)
		i /= 10
	}
	return string(d)
}

var reLastAnswer = regexp.MustCompile(`(?s)<answer>(.*?)</answer>`)

// ExtractAnswer returns the content of the last <answer>...</answer> in a
// response (score only the response: the prompt holds an example tag).
func ExtractAnswer(response string) (string, bool) {
	ms := reLastAnswer.FindAllStringSubmatch(response, -1)
	if len(ms) == 0 {
		return "", false
	}
	return strings.TrimSpace(ms[len(ms)-1][1]), true
}

// Normalize is SQuAD normalisation: lower-case, drop punctuation, drop the
// articles a/an/the, collapse white space.
func Normalize(s string) string {
	s = strings.ToLower(s)
	var b strings.Builder
	for _, r := range s {
		if isPunct(r) {
			continue
		}
		b.WriteRune(r)
	}
	return strings.Join(strings.Fields(removeArticles(b.String())), " ")
}

// removeArticles is Python's re.sub(r"\b(a|an|the)\b", " ", s) on a str:
// every maximal run of word characters that is exactly a, an or the
// becomes a space. Python's \b is Unicode-aware (a word character is a
// letter, a number or '_'); Go's is ASCII-only and would strip the "a" of
// "sofía" or "año".
func removeArticles(s string) string {
	var b strings.Builder
	for len(s) > 0 {
		i := strings.IndexFunc(s, isWordRune)
		if i < 0 {
			b.WriteString(s)
			break
		}
		b.WriteString(s[:i])
		s = s[i:]
		j := strings.IndexFunc(s, func(r rune) bool { return !isWordRune(r) })
		if j < 0 {
			j = len(s)
		}
		switch w := s[:j]; w {
		case "a", "an", "the":
			b.WriteByte(' ')
		default:
			b.WriteString(w)
		}
		s = s[j:]
	}
	return b.String()
}

// isWordRune is Python's \w for str patterns: str.isalnum() or '_'.
func isWordRune(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r)
}

// isPunct matches Python's string.punctuation (ASCII punctuation).
func isPunct(r rune) bool {
	return strings.ContainsRune("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", r)
}

// ExactMatch is 1 when the normalised prediction equals any normalised gold
// answer, else 0.
func ExactMatch(pred string, golds []string) float64 {
	np := Normalize(pred)
	for _, g := range golds {
		if Normalize(g) == np {
			return 1
		}
	}
	return 0
}

// ContainsAnswer reports whether text contains a gold answer as whole
// words, under the normalisation ExactMatch scores with: some gold's
// Normalize form, when it is not empty, occurs in Normalize(text) starting
// and ending at word boundaries (the single spaces Normalize leaves
// between words, or the ends of the text). Normalize drops punctuation
// rather than splitting at it, so "Paris-based" and "Paris's" are one
// word each and contain no "Paris", and a gold that is only an article or
// punctuation never matches. Search-R1's retrieval check
// (is_retrieval_correct in qa_em_format.py) tests a plain substring
// instead, which also finds "art" in "party" and "no" in "not".
func ContainsAnswer(text string, golds []string) bool {
	nt := " " + Normalize(text) + " "
	for _, g := range golds {
		if ng := Normalize(g); ng != "" && strings.Contains(nt, " "+ng+" ") {
			return true
		}
	}
	return false
}

// InfoText returns what an <information> block (InfoBlock's text, or the
// part of it a policy was shown when the block was cut) holds between its
// tags: the text after <information>, up to </information> or, in a block
// cut before that tag, to its end, less a start of the closing tag the cut
// left ("</inf"); "" when the opening tag is not all there.
func InfoText(block string) string {
	_, after, ok := strings.Cut(block, "<information>")
	if !ok {
		return ""
	}
	text, _, closed := strings.Cut(after, infoClose)
	if !closed {
		for k := len(infoClose) - 1; k > 0; k-- {
			if strings.HasSuffix(text, infoClose[:k]) {
				return text[:len(text)-k]
			}
		}
	}
	return text
}

// infoClose closes an <information> block.
const infoClose = "</information>"

// F1 is the best token-level F1 of the prediction against any gold answer.
func F1(pred string, golds []string) float64 {
	best := 0.0
	pt := strings.Fields(Normalize(pred))
	for _, g := range golds {
		gt := strings.Fields(Normalize(g))
		if f := tokenF1(pt, gt); f > best {
			best = f
		}
	}
	return best
}

func tokenF1(pred, gold []string) float64 {
	if len(pred) == 0 || len(gold) == 0 {
		if len(pred) == len(gold) {
			return 1
		}
		return 0
	}
	counts := map[string]int{}
	for _, t := range gold {
		counts[t]++
	}
	same := 0
	for _, t := range pred {
		if counts[t] > 0 {
			counts[t]--
			same++
		}
	}
	if same == 0 {
		return 0
	}
	p := float64(same) / float64(len(pred))
	r := float64(same) / float64(len(gold))
	return 2 * p * r / (p + r)
}

// ActionSpan is ParseAction that also returns the byte span [start, end) of
// the whole matched action, tags included (start = end = -1 without one).
// Like Python's re.search(r"<(search|answer)>(.*?)</\1>", text, re.DOTALL),
// it takes the opening tags in order and the first whose own closing tag
// follows (the opening tags cannot overlap, so a plain scan finds the same
// ones as the regexp; it runs on every turn, so it does without one).
func ActionSpan(text string) (kind, content string, start, end int) {
	for from := 0; ; {
		i := strings.Index(text[from:], "<")
		if i < 0 {
			return ActionNone, "", -1, -1
		}
		at := from + i
		rest := text[at:]
		var tag, closing string
		switch {
		case strings.HasPrefix(rest, "<search>"):
			tag, closing = ActionSearch, "</search>"
		case strings.HasPrefix(rest, "<answer>"):
			tag, closing = ActionAnswer, "</answer>"
		default:
			from = at + 1
			continue
		}
		open := at + len(tag) + 2
		if j := strings.Index(text[open:], closing); j >= 0 {
			return tag, strings.TrimSpace(text[open : open+j]), at, open + j + len(closing)
		}
		from = open
	}
}

// Evaluation strategies.
const (
	// StrategyDirect asks the question alone and answers once.
	StrategyDirect = "direct"
	// StrategyRAG retrieves top-k passages with the question and answers
	// once with them in the prompt.
	StrategyRAG = "rag"
	// StrategySearch runs the search agent loop.
	StrategySearch = "search"
)

// Strategies lists the evaluation strategies.
var Strategies = []string{StrategyDirect, StrategyRAG, StrategySearch}

// answerInstruction is the answer-format part shared by the direct and RAG
// baselines' prompts (no search tool is offered).
const answerInstruction = "Provide the answer inside <answer> and </answer>, without detailed illustrations. For example, <answer> Beijing </answer>. "

// DirectPrompt is the direct-inference baseline's user message: the
// question alone, answered in an <answer> tag.
func DirectPrompt(question string) string {
	return "Answer the given question. " + answerInstruction + "Question: " + NormalizeQuestion(question) + "\n"
}

// RAGPrompt is the RAG baseline's user message: the passages retrieved with
// the question, in the same <information> block the agent sees, then the
// question.
func RAGPrompt(question string, contents []string) string {
	return "Answer the given question using the retrieved passages. " + answerInstruction +
		strings.TrimSpace(InfoBlock(contents)) + "\n\nQuestion: " + NormalizeQuestion(question) + "\n"
}
