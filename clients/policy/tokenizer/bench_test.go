package tokenizer

import (
	"bufio"
	"encoding/json"
	"os"
	"testing"
)

// corpusTexts is the contents of every passage of the shipped corpus.
func corpusTexts(b *testing.B) (texts []string, bytes int) {
	b.Helper()
	f, err := os.Open("../../recipes/data/corpus/passages.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var p struct {
			Contents string `json:"contents"`
		}
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			b.Fatal(err)
		}
		texts = append(texts, p.Contents)
		bytes += len(p.Contents)
	}
	return texts, bytes
}

// benchCorpus encodes the whole corpus b.N times and reports tokens per
// second; fresh: a new Tokenizer (empty piece cache) for every pass.
func benchCorpus(b *testing.B, fresh bool) {
	texts, size := corpusTexts(b)
	tok := qwen(b)
	tokens := 0
	for _, s := range texts { // warms the cache; counts the tokens
		tokens += len(tok.Encode(s))
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	var ids []int
	for i := 0; i < b.N; i++ {
		if fresh {
			b.StopTimer()
			tok = qwen(b)
			b.StartTimer()
		}
		for _, s := range texts {
			ids = tok.AppendEncode(ids[:0], s)
		}
	}
	b.ReportMetric(float64(tokens)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(float64(tokens), "tokens/pass")
}

// BenchmarkEncodeCorpus: the shipped corpus (12,596 passages, 6.6 MB),
// the piece cache warm.
func BenchmarkEncodeCorpus(b *testing.B) { benchCorpus(b, false) }

// BenchmarkEncodeCorpusColdCache: the same, each pass with an empty cache.
func BenchmarkEncodeCorpusColdCache(b *testing.B) { benchCorpus(b, true) }

// BenchmarkQwen25Parse: building the embedded tokenizer from its bytes.
func BenchmarkQwen25Parse(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if _, err := Parse(qwen25JSON); err != nil {
			b.Fatal(err)
		}
	}
}
