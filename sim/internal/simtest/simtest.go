// Package simtest gives the tests of sim, sim/lm and sim/trainer what
// they share: the shipped sample data (the corpus and the FlashRAG question
// files, read once per test binary), the real BM25 index over the corpus
// (built once per test binary), the orchestrator's default judge prompt, a
// JSON client of the simulated servers (with the Tinker calls the
// trainer's tests make) and a few small helpers. It does not import sim/lm,
// so that lm's own tests can use it.
package simtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/clients/retriever/bm25"
)

// The shipped sample data (recipes/data, found from this file).
var (
	dataDir = func() string {
		_, file, _, _ := runtime.Caller(0)
		return filepath.Join(filepath.Dir(file), "..", "..", "..", "recipes", "data")
	}()
	corpusPath = filepath.Join(dataDir, "corpus", "passages.jsonl")
	qaDir      = filepath.Join(dataDir, "qa")
)

// QA is one FlashRAG question.
type QA struct {
	ID      string   `json:"id"`
	Q       string   `json:"question"`
	Answers []string `json:"golden_answers"`
}

// Data is the sample data every test shares: read once per test binary.
type Data struct {
	Corpus    []string // contents strings, file order
	corpusRaw [][]byte // the corpus file's lines (for the BM25 index)
	Hotpot    []QA     // the HotpotQA questions, file order
	// Answers are the gold answers of every question file's questions,
	// by question text (what the orchestrator gives the simulated model,
	// orchestrator.SimAnswers).
	Answers map[string][]string
}

var (
	dataOnce sync.Once
	data     *Data
	dataErr  error

	bmOnce  sync.Once
	bmIndex *bm25.Index
	bmErr   error
	bmDir   string
)

// Main runs a package's tests and then closes the BM25 index and removes
// its directory; a package's TestMain calls os.Exit(simtest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if bmIndex != nil {
		bmIndex.Close()
	}
	if bmDir != "" {
		os.RemoveAll(bmDir)
	}
	return code
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

// Load reads the sample corpus and questions (once per test binary).
func Load(t testing.TB) *Data {
	t.Helper()
	dataOnce.Do(func() {
		d := &Data{Answers: map[string][]string{}}
		dataErr = readJSONL(corpusPath, func(line []byte) error {
			var p struct {
				Contents string `json:"contents"`
			}
			if err := json.Unmarshal(line, &p); err != nil {
				return err
			}
			d.Corpus = append(d.Corpus, p.Contents)
			d.corpusRaw = append(d.corpusRaw, line)
			return nil
		})
		if dataErr != nil {
			return
		}
		files, err := filepath.Glob(filepath.Join(qaDir, "*.jsonl"))
		if err != nil || len(files) == 0 {
			dataErr = err
			if dataErr == nil {
				dataErr = os.ErrNotExist
			}
			return
		}
		for _, path := range files {
			dataErr = readJSONL(path, func(line []byte) error {
				var q QA
				if err := json.Unmarshal(line, &q); err != nil {
					return err
				}
				d.Answers[q.Q] = append(d.Answers[q.Q], q.Answers...)
				if strings.HasSuffix(path, "hotpotqa.jsonl") {
					d.Hotpot = append(d.Hotpot, q)
				}
				return nil
			})
			if dataErr != nil {
				return
			}
		}
		data = d
	})
	if dataErr != nil {
		t.Fatalf("test fixture: %v", dataErr)
	}
	return data
}

// bm25Passages is how many corpus passages the BM25 index holds under the
// race detector or -short (the first HotpotQA questions' paragraphs): the
// full build takes half a minute under -race.
const bm25Passages = 1000

// index returns the real BM25 index over the sample corpus (over its first
// bm25Passages passages under -race or -short).
func index(t testing.TB) *bm25.Index {
	t.Helper()
	d := Load(t)
	bmOnce.Do(func() {
		bmDir, bmErr = os.MkdirTemp("", "sim-bm25-")
		if bmErr != nil {
			return
		}
		path := corpusPath
		if Race || testing.Short() {
			path = filepath.Join(bmDir, "passages.jsonl")
			bmErr = os.WriteFile(path, append(bytes.Join(d.corpusRaw[:bm25Passages], []byte("\n")), '\n'), 0o644)
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

// Search returns the contents of the top-k BM25 hits of each query.
func Search(t testing.TB, queries []string, k int) [][]string {
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

// JudgePrompt renders the orchestrator's default judge prompt
// (orchestrator.DefaultJudgePrompt; sim cannot import orchestrator).
func JudgePrompt(question string, golds []string, response string) string {
	var b strings.Builder
	b.WriteString("You review the work of a search agent that answers questions by issuing search queries to a Wikipedia search engine. Its final answer was wrong.\n\n")
	b.WriteString("Question: " + format.NormalizeQuestion(question) + "\n")
	if len(golds) > 0 {
		b.WriteString("Gold answer(s): " + strings.Join(golds, " | ") + "\n")
	}
	b.WriteString("Trajectory:\n" + strings.TrimSpace(response) + "\n\n")
	b.WriteString("Write a short, directive critique of the agent's search behaviour, in at most three sentences: say what it should have searched for instead, quoting the exact search query in double quotes. Do not state the answer itself.")
	return b.String()
}

// Concat joins token slices into a new slice.
func Concat(parts ...[]int) []int {
	var out []int
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// Quoted returns the first double-quoted phrase of s ("" without one).
func Quoted(s string) string {
	i := strings.IndexByte(s, '"')
	if i < 0 {
		return ""
	}
	j := strings.IndexByte(s[i+1:], '"')
	if j < 0 {
		return ""
	}
	return s[i+1 : i+1+j]
}
