package lm

import (
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/sim/internal/simtest"
)

// qaItem is one FlashRAG question.
type qaItem = simtest.QA

// fixture is the data and model every test shares: built once per test
// binary.
type fixture struct {
	corpus []string // contents strings, file order
	hotpot []qaItem
	tk     *Tokenizer
	model  *Model
}

var (
	fxOnce sync.Once
	fx     *fixture
	fxErr  error
)

// The helpers the tests share with sim's (simtest), under their names here.
var (
	search      = simtest.Search
	judgePrompt = simtest.JudgePrompt
	concat      = simtest.Concat
	quoted      = simtest.Quoted
)

// raceEnabled reports whether the race detector is on.
const raceEnabled = simtest.Race

func TestMain(m *testing.M) { os.Exit(simtest.Main(m)) }

// getFixture loads the sample corpus and questions and builds the tokenizer
// and model the way the orchestrator does (the model knows every question
// file's gold answers, for its reading skill).
func getFixture(t testing.TB) *fixture {
	t.Helper()
	d := simtest.Load(t)
	fxOnce.Do(func() {
		f := &fixture{corpus: d.Corpus, hotpot: d.Hotpot}
		if f.tk, fxErr = NewTokenizer(); fxErr != nil {
			return
		}
		// As the orchestrator starts it (orchestrator.SimAnswers): with
		// the gold answers of every question file.
		f.model = NewModel(f.tk, 1e-6)
		f.model.SetAnswers(d.Answers)
		fx = f
	})
	if fxErr != nil {
		t.Fatalf("test fixture: %v", fxErr)
	}
	return fx
}

// promptText is the chat-templated Search-R1 prompt of a question, with an
// optional hint, ending with the assistant header.
func promptText(question, hint string) string {
	return ChatTemplate([]ChatMessage{{Role: "user", Content: format.UserPrompt(question, hint)}}, true)
}

// containsGold reports whether a passage holds one of the gold answers
// (loosely normalised, on word boundaries).
func containsGold(passage string, golds []string) bool {
	p := " " + looseNorm(passage) + " "
	for _, g := range golds {
		if n := looseNorm(g); n != "" && strings.Contains(p, " "+n+" ") {
			return true
		}
	}
	return false
}

// isAnswerGold reports whether an answer matches a gold answer exactly
// after SQuAD normalisation (the reward's test).
func isAnswerGold(ans string, golds []string) bool { return format.ExactMatch(ans, golds) == 1 }

// evalQuestions are HotpotQA questions whose gold answer is not yes/no,
// not an option named in the question and not words of the question: the
// ones a closed-book agent cannot answer from the question alone.
func evalQuestions(f *fixture, n int) []qaItem {
	var out []qaItem
	for _, q := range f.hotpot {
		if len(out) == n {
			break
		}
		ok := true
		for _, g := range q.Answers {
			ng := format.Normalize(g)
			if ng == "yes" || ng == "no" || ng == "" || strings.Contains(" "+format.Normalize(q.Q)+" ", " "+ng+" ") {
				ok = false
			}
		}
		if ok {
			out = append(out, q)
		}
	}
	return out
}
