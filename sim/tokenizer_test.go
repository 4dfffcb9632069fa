package sim

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/hindsearch/hindsearch/orchestrator/format"
)

// smallTokenizer is a tokenizer over the Search-R1 texts and a few words.
func smallTokenizer() *Tokenizer {
	return NewTokenizer(Vocabulary(Config{Corpus: []string{"\"Oplismenus\"\nOplismenus is a small genus of grasses."},
		VocabTexts: []string{"Lavatera or Oplismenus?"}})...)
}

var roundTripSeeds = []string{
	"",
	"hello world",
	"  two  spaces   three   ",
	"\n\n\n",
	"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
	"<|im_sta", "<|", "<|im_end|", "|>",
	"日本語のテキスト ✓ emoji 🎉 ñandú Ünïcödé",
	"\xff\xfe invalid \xc3 utf-8 \xed\xa0\x80",
	"tab\there\r\nwindows",
	"123,456.78 1945 -3e10",
	"\"Title\"\ntext with \"quotes\" and 'apostrophes'",
	format.Instruction + "Question: In which genus number of species are more, Lavatera or Oplismenus?\n",
	format.InvalidActionText,
	"<search> Lavatera </search>\n\n<information>Doc 1(Title: \"Lavatera\") x</information>\n\n",
	"\x00\x01\x02 control",
}

func TestTokenizerRoundTrip(t *testing.T) {
	f := getFixture(t)
	rng := rand.New(rand.NewPCG(5, 5))
	inputs := slices.Clone(roundTripSeeds)
	for i := 0; i < 200; i++ {
		b := make([]byte, rng.IntN(64))
		for j := range b {
			b[j] = byte(rng.IntN(256))
		}
		inputs = append(inputs, string(b))
	}
	inputs = append(inputs, f.corpus[:50]...)
	for _, tk := range []*Tokenizer{smallTokenizer(), f.tk} {
		for _, s := range inputs {
			ids := tk.Encode(s)
			got, ok := tk.Decode(ids)
			if !ok || got != s {
				t.Errorf("Decode(Encode(%q)) = %q, %v", s, got, ok)
			}
			for _, id := range ids {
				if id < 0 || id >= tk.VocabSize() {
					t.Fatalf("Encode(%q) gave id %d outside [0, %d)", s, id, tk.VocabSize())
				}
			}
		}
	}
}

func TestTokenizerVocabulary(t *testing.T) {
	tk := smallTokenizer()
	for i, s := range []string{TokEndOfText, TokIMStart, TokIMEnd} {
		id, ok := tk.ID(s)
		if !ok || id != i || !tk.IsSpecial(id) || tk.Piece(id) != s {
			t.Errorf("special %q: id %d %v", s, id, ok)
		}
		if got := tk.Encode(s); !slices.Equal(got, []int{i}) {
			t.Errorf("Encode(%q) = %v, want the special token", s, got)
		}
	}
	if tk.IsSpecial(3) || tk.IsSpecial(-1) {
		t.Error("IsSpecial of a byte token or -1")
	}
	// Known words are one token; unknown words fall back to bytes.
	if ids := tk.Encode(" Oplismenus"); len(ids) != 1 {
		t.Errorf("known word: %v", ids)
	}
	if ids := tk.Encode(" Zyzzyva"); len(ids) != len(" Zyzzyva") {
		t.Errorf("unknown word: %d tokens, want one per byte", len(ids))
	}
	// Out-of-range ids decode to nothing and report it.
	if s, ok := tk.Decode([]int{-1, tk.VocabSize(), tk.byteBase + 'a'}); ok || s != "a" {
		t.Errorf("Decode of bad ids = %q, %v", s, ok)
	}
	if tk.Piece(-1) != "" || tk.Piece(tk.VocabSize()) != "" {
		t.Error("Piece of an out-of-range id is not empty")
	}
	// Every piece is distinct, so a token's text determines its id.
	seen := map[string]int{}
	for id := 0; id < tk.VocabSize(); id++ {
		p := tk.Piece(id)
		if prev, dup := seen[p]; dup {
			t.Errorf("piece %q has ids %d and %d", p, prev, id)
		}
		seen[p] = id
	}
}

// TestChatTemplate checks the Qwen2.5 layout and the simulator's system
// line.
func TestChatTemplate(t *testing.T) {
	user := []chatMessage{{Role: "user", Content: "Q?"}}
	want := "<|im_start|>system\n" + SystemPrompt + "<|im_end|>\n<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n"
	if got := ChatTemplate(user, true); got != want {
		t.Errorf("ChatTemplate = %q, want %q", got, want)
	}
	if got := ChatTemplate(user, false); got != strings.TrimSuffix(want, "<|im_start|>assistant\n") {
		t.Errorf("without generation prompt: %q", got)
	}
	sys := []chatMessage{{Role: "system", Content: "S"}, {Role: "user", Content: "Q?"}}
	if got := ChatTemplate(sys, true); strings.Contains(got, SystemPrompt) || !strings.HasPrefix(got, "<|im_start|>system\nS<|im_end|>\n") {
		t.Errorf("with a system message: %q", got)
	}
	if !strings.Contains(SystemPrompt, "simulat") {
		t.Errorf("system line %q does not say it is simulated", SystemPrompt)
	}
}

// FuzzTokenizerRoundTrip checks Decode(Encode(s)) == s for any string,
// valid UTF-8 or not.
func FuzzTokenizerRoundTrip(f *testing.F) {
	for _, s := range roundTripSeeds {
		f.Add(s)
	}
	tk := smallTokenizer()
	f.Fuzz(func(t *testing.T, s string) {
		ids := tk.Encode(s)
		got, ok := tk.Decode(ids)
		if !ok || got != s {
			t.Fatalf("Decode(Encode(%q)) = %q, %v", s, got, ok)
		}
		if utf8.ValidString(s) && len(ids) > len(s) {
			t.Fatalf("%d tokens for %d bytes", len(ids), len(s))
		}
	})
}
