package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/clients/retriever/bm25"
)

// The shipped sample data (relative to the sim package directory).
var (
	corpusPath = filepath.Join("..", "recipes", "data", "corpus", "passages.jsonl")
	qaDir      = filepath.Join("..", "recipes", "data", "qa")
)

// qaItem is one FlashRAG question.
type qaItem struct {
	ID      string   `json:"id"`
	Q       string   `json:"question"`
	Answers []string `json:"golden_answers"`
}

// fixture is the data and model every test shares: built once per test
// binary.
type fixture struct {
	corpus    []string // contents strings, file order
	corpusRaw [][]byte // the corpus file's lines
	hotpot    []qaItem
	tk        *Tokenizer
	model     *Model
}

var (
	fxOnce sync.Once
	fx     *fixture
	fxErr  error

	bmOnce  sync.Once
	bmIndex *bm25.Index
	bmErr   error
	bmDir   string
	bmSmall bool // the index holds only the first passages (race/short)
)

func TestMain(m *testing.M) {
	code := m.Run()
	if bmIndex != nil {
		bmIndex.Close()
	}
	if bmDir != "" {
		os.RemoveAll(bmDir)
	}
	os.Exit(code)
}

func readJSONL(path string, each func(line []byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if err := each(append([]byte(nil), line...)); err != nil {
			return err
		}
	}
	return sc.Err()
}

// getFixture loads the sample corpus and questions and builds the tokenizer
// and model the way the orchestrator does (the model knows every question
// file's gold answers, for its reading skill).
func getFixture(t testing.TB) *fixture {
	t.Helper()
	fxOnce.Do(func() {
		f := &fixture{}
		fxErr = readJSONL(corpusPath, func(line []byte) error {
			var p struct {
				Contents string `json:"contents"`
			}
			if err := json.Unmarshal(line, &p); err != nil {
				return err
			}
			f.corpus = append(f.corpus, p.Contents)
			f.corpusRaw = append(f.corpusRaw, line)
			return nil
		})
		if fxErr != nil {
			return
		}
		files, err := filepath.Glob(filepath.Join(qaDir, "*.jsonl"))
		if err != nil || len(files) == 0 {
			fxErr = err
			if fxErr == nil {
				fxErr = os.ErrNotExist
			}
			return
		}
		answers := map[string][]string{}
		for _, path := range files {
			fxErr = readJSONL(path, func(line []byte) error {
				var q qaItem
				if err := json.Unmarshal(line, &q); err != nil {
					return err
				}
				answers[q.Q] = append(answers[q.Q], q.Answers...)
				if strings.HasSuffix(path, "hotpotqa.jsonl") {
					f.hotpot = append(f.hotpot, q)
				}
				return nil
			})
			if fxErr != nil {
				return
			}
		}
		if f.tk, fxErr = NewTokenizer(); fxErr != nil {
			return
		}
		// As the orchestrator starts it (orchestrator.SimAnswers): with
		// the gold answers of every question file.
		f.model = NewModel(f.tk, 1e-6)
		f.model.SetAnswers(answers)
		fx = f
	})
	if fxErr != nil {
		t.Fatalf("test fixture: %v", fxErr)
	}
	return fx
}

// bm25Passages is how many corpus passages the BM25 index holds under the
// race detector or -short (the first HotpotQA questions' paragraphs): the
// full build takes half a minute under -race.
const bm25Passages = 1000

// index returns the real BM25 index over the sample corpus (over its first
// bm25Passages passages under -race or -short).
func index(t testing.TB) *bm25.Index {
	t.Helper()
	f := getFixture(t)
	bmOnce.Do(func() {
		bmDir, bmErr = os.MkdirTemp("", "sim-bm25-")
		if bmErr != nil {
			return
		}
		path := corpusPath
		if raceEnabled || testing.Short() {
			bmSmall = true
			path = filepath.Join(bmDir, "passages.jsonl")
			bmErr = os.WriteFile(path, append(bytes.Join(f.corpusRaw[:bm25Passages], []byte("\n")), '\n'), 0o644)
			if bmErr != nil {
				return
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		bmIndex, bmErr = bm25.Open(ctx, path, filepath.Join(bmDir, "cache"), nil)
	})
	if bmErr != nil {
		t.Fatalf("bm25: %v", bmErr)
	}
	return bmIndex
}

// search returns the contents of the top-k BM25 hits of each query.
func search(t testing.TB, queries []string, k int) [][]string {
	t.Helper()
	res, err := index(t).Search(context.Background(), queries, k)
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]string, len(res))
	for i, hits := range res {
		for _, h := range hits {
			out[i] = append(out[i], h.Contents)
		}
	}
	return out
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
