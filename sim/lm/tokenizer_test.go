package lm

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/hindsearch/hindsearch/clients/policy/format"
)

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

// TestSimTokenizerIsQwen25 checks the simulator's tokenizer is Qwen2.5's:
// its vocabulary size, the ids of its added tokens, and Qwen's token
// boundaries at the ends of the agent's turns.
func TestSimTokenizerIsQwen25(t *testing.T) {
	tk := getFixture(t).tk
	if tk.VocabSize() != 151665 {
		t.Errorf("vocabulary of %d ids, want Qwen2.5's 151665", tk.VocabSize())
	}
	for s, want := range map[string]int{TokEndOfText: 151643, TokIMStart: 151644, TokIMEnd: 151645} {
		id, ok := tk.ID(s)
		if !ok || id != want || !tk.IsSpecial(id) || tk.Piece(id) != s {
			t.Errorf("%q: id %d %v, want %d, special", s, id, ok, want)
		}
		if got := tk.Encode("x" + s + "y"); !slices.Equal(got, []int{87, want, 88}) {
			t.Errorf("Encode(x%sy) = %v: the added token is not matched whole", s, got)
		}
	}
	if tk.IsSpecial(1836) || tk.IsSpecial(-1) || tk.IsSpecial(tk.VocabSize()) {
		t.Error("IsSpecial of a BPE token or an out-of-range id")
	}
	for text, want := range map[string][]string{
		// A search turn ends in ">\n\n", past the stop string </search>.
		" </search>\n\n":           {" </", "search", ">\n\n"},
		"</information>\n\n":       {"</", "information", ">\n\n"},
		TokIMStart + "assistant\n": {TokIMStart, "assistant", "\n"},
		" </answer>":               {" </", "answer", ">"},
		// A token may hold part of a character: 東 is e6 9d b1.
		"<search> Müller 東京 </search>": {"<", "search", ">", " Müller", " \xe6\x9d", "\xb1", "京", " </", "search", ">"},
	} {
		var got []string
		for _, id := range tk.Encode(text) {
			b, ok := tk.TokenBytes(id)
			if !ok || string(b) != tk.Piece(id) {
				t.Fatalf("TokenBytes(%d) = %q, %v; Piece %q", id, b, ok, tk.Piece(id))
			}
			got = append(got, string(b))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%q tokenizes as %q, want %q", text, got, want)
		}
	}
	if _, ok := tk.TokenBytes(tk.VocabSize()); ok {
		t.Error("TokenBytes of an out-of-range id")
	}
	// AppendEncode appends.
	if got := tk.AppendEncode([]int{7}, "</search>"); !slices.Equal(got, []int{7, 522, 1836, 29}) {
		t.Errorf("AppendEncode = %v", got)
	}
	// Out-of-range ids decode to nothing and report it.
	if s, ok := tk.Decode([]int{-1, tk.VocabSize(), 64}); ok || s != "a" {
		t.Errorf("Decode of bad ids = %q, %v", s, ok)
	}
	if tk.Piece(-1) != "" || tk.Piece(tk.VocabSize()) != "" {
		t.Error("Piece of an out-of-range id is not empty")
	}
}

// TestSimTokenizerRoundTrip checks Decode(Encode(s)) is s after NFC (the
// tokenizer's normaliser), valid UTF-8 or not.
func TestSimTokenizerRoundTrip(t *testing.T) {
	f := getFixture(t)
	for _, s := range append(slices.Clone(roundTripSeeds), f.corpus[:50]...) {
		ids := f.tk.Encode(s)
		got, ok := f.tk.Decode(ids)
		if want := norm.NFC.String(s); !ok || got != want {
			t.Errorf("Decode(Encode(%q)) = %q, %v", s, got, ok)
		}
	}
}

// TestSimDecodeTextIsLossyLikePython checks DecodeText replaces ill-formed
// UTF-8 as Python's decode("utf-8", "replace") does (one U+FFFD per maximal
// subpart) and drops special tokens only when asked.
func TestSimDecodeTextIsLossyLikePython(t *testing.T) {
	for in, want := range map[string]string{
		"plain":            "plain",
		"\xe6\x97":         "\uFFFD",       // 2 of the 3 bytes of 日
		"\xff\xfe":         "\uFFFD\uFFFD", // bytes that start nothing
		"\xed\xa0\x80":     "\uFFFD\uFFFD\uFFFD",
		"\xe0\x80":         "\uFFFD\uFFFD",
		"\xf0\x9f\x98":     "\uFFFD",
		"a\xc3":            "a\uFFFD",
		"\xc3\xa9\xe6\x97": "é\uFFFD",
		"\xf4\x90\x80\x80": "\uFFFD\uFFFD\uFFFD\uFFFD",
		"\xf0\x9f\x98\x80": "😀",
	} {
		if got := lossyUTF8([]byte(in)); got != want {
			t.Errorf("lossyUTF8(%q) = %q, want %q", in, got, want)
		}
	}
	tk := getFixture(t).tk
	// 龘 (e9 be 98) is two tokens, e9 be and 98.
	ids := tk.Encode("<|im_start|>龘")
	var half []int
	for _, id := range ids[1:] {
		if b, _ := tk.TokenBytes(id); !utf8.Valid(b) {
			half = append(half, id)
		}
	}
	if got, ok := tk.DecodeText(ids, false); !ok || got != "<|im_start|>龘" || len(half) != 2 {
		t.Errorf("DecodeText = %q, %v (%d partial tokens)", got, ok, len(half))
	}
	if got, _ := tk.DecodeText(ids, true); got != "龘" {
		t.Errorf("DecodeText skipping special tokens = %q", got)
	}
	if got, ok := tk.DecodeText([]int{tk.VocabSize()}, false); ok || got != "" {
		t.Errorf("DecodeText of a bad id = %q, %v", got, ok)
	}
	for _, id := range half {
		if got, _ := tk.DecodeText([]int{id}, false); !strings.Contains(got, "\uFFFD") {
			t.Errorf("token %d (part of a character) decodes alone to %q", id, got)
		}
	}
}

// TestSimEncodeCacheIsBounded checks the tokenizer's encoding cache keeps
// at most two generations of encodeCacheTexts texts and returns what
// encoding returns.
func TestSimEncodeCacheIsBounded(t *testing.T) {
	var c encodeCache
	c.init(4)
	for i := range 20 {
		c.put(strings.Repeat("x", i), []int{i})
		if n := len(c.cur) + len(c.old); n > 8 {
			t.Fatalf("%d texts cached, bound 8", n)
		}
	}
	if ids, ok := c.get(strings.Repeat("x", 19)); !ok || !slices.Equal(ids, []int{19}) {
		t.Errorf("latest text: %v %v", ids, ok)
	}
	if _, ok := c.get(""); ok {
		t.Error("the oldest text is still cached")
	}
	tk := getFixture(t).tk
	text := thoughtSearch + "<search> Lavatera </search>" + searchTurnEnd
	if a, b := tk.encodeShared(text), tk.encodeShared(text); !slices.Equal(a, tk.Encode(text)) || &a[0] != &b[0] {
		t.Errorf("encodeShared: %v, %v", a, b)
	}
}

// TestChatTemplate checks Qwen2.5's template: its default system line, a
// system message of the caller's, later system messages, tool messages
// grouped in one user turn, roles it leaves out.
func TestChatTemplate(t *testing.T) {
	user := []ChatMessage{{Role: "user", Content: "Q?"}}
	want := "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n" +
		"<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n"
	if got := ChatTemplate(user, true); got != want {
		t.Errorf("ChatTemplate = %q, want %q", got, want)
	}
	if got := ChatTemplate(user, false); got != strings.TrimSuffix(want, "<|im_start|>assistant\n") {
		t.Errorf("without generation prompt: %q", got)
	}
	msgs := []ChatMessage{{Role: "system", Content: "S"}, {Role: "user", Content: "Q?"}, {Role: "assistant", Content: "A"},
		{Role: "tool", Content: "r1"}, {Role: "tool", Content: "r2"}, {Role: "developer", Content: "D"}, {Role: "system", Content: "S2"}}
	want = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n" +
		"<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n</tool_response><|im_end|>\n" +
		"<|im_start|>system\nS2<|im_end|>\n"
	if got := ChatTemplate(msgs, false); got != want {
		t.Errorf("ChatTemplate = %q, want %q", got, want)
	}
}
