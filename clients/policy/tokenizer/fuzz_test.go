package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// oraclePattern is the Split pattern run by regexp2 as the oracle of the
// scanner. regexp2's (?i) lowers characters one by one and so does not fold
// U+017F to s as Oniguruma does; the contraction group is written out with
// the fold made explicit. The rest is the pattern as tokenizer.json has it:
// regexp2's \s is .NET's [\f\n\r\t\v\x85\p{Z}], the same set as
// Oniguruma's Unicode \s.
func oraclePattern(pattern string) string {
	if pattern == gpt2Pattern {
		return pattern // case-sensitive contractions: nothing to fold
	}
	const group = `(?i:'s|'t|'re|'ve|'m|'ll|'d)`
	if !strings.HasPrefix(pattern, group) {
		panic("pattern without the contraction group")
	}
	return `(?:'[sSſ]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])` + pattern[len(group):]
}

type oracle struct {
	re *regexp2.Regexp
	sp splitter
}

func newOracle(t testing.TB, pattern string, maxDigits int) oracle {
	t.Helper()
	re, err := regexp2.Compile(oraclePattern(pattern), regexp2.None)
	if err != nil {
		t.Fatal(err)
	}
	return oracle{re: re, sp: splitter{maxDigits: maxDigits, gpt2: pattern == gpt2Pattern}}
}

// regexPieces is what Hugging Face's Split (Isolated) makes of s with the
// regex: its matches and the text between them.
func (o oracle) regexPieces(t testing.TB, s string) []string {
	runes := []rune(s)
	var out []string
	prev := 0
	m, err := o.re.FindRunesMatch(runes)
	for ; m != nil && err == nil; m, err = o.re.FindNextMatch(m) {
		if m.Index > prev {
			out = append(out, string(runes[prev:m.Index]))
		}
		if m.Length > 0 {
			out = append(out, string(runes[m.Index:m.Index+m.Length]))
		}
		prev = m.Index + m.Length
	}
	if err != nil {
		t.Fatal(err)
	}
	if prev < len(runes) {
		out = append(out, string(runes[prev:]))
	}
	return out
}

func (o oracle) scanPieces(s string) []string {
	var out []string
	for len(s) > 0 {
		n := o.sp.next(s)
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

func (o oracle) check(t *testing.T, s string) bool {
	t.Helper()
	want := o.regexPieces(t, s)
	got := o.scanPieces(s)
	if !slices.Equal(got, want) {
		t.Errorf("%q:\nscanner %q\n  regex %q", s, got, want)
		return false
	}
	return true
}

// alphabet is what random texts are made of: every class boundary the
// pattern has (letters, numbers, \r, \n, other spaces, symbols, the
// apostrophe and contraction letters, U+017F, combining marks, characters
// outside the BMP, U+0085, U+FEFF, U+2028).
var alphabet = []rune{' ', ' ', ' ', '\t', '\n', '\r', '\v', '\f', 'a', 'S', 's', 'T', 'r', 'E', 'e', 'v', 'l', 'L', 'm', 'd', 'D', 'x',
	'\'', '\'', 'ſ', '1', '0', '٣', 'Ⅻ', '①', '.', '!', '<', '>', '/', '"', '\u0085', '\u00a0', '\u2028', '\u2029', '\u3000', '\ufeff',
	'é', '\u0301', '\u0308', '中', '国', 'ा', '😀', '\u200d', '\ufe0f', '\u200b', '_', '$', '\u00ad', 'Ω', 'Å'}

func randomText(r *rand.Rand) string {
	var b strings.Builder
	for n := r.IntN(24); n > 0; n-- {
		b.WriteRune(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()
}

// TestSplitterMatchesRegex: the scanner cuts every reference text, every
// hard case and 20,000 random texts exactly as the regex does, for Qwen2's
// pattern, Llama 3's and GPT-2's.
func TestSplitterMatchesRegex(t *testing.T) {
	rows := append(readRows(t, "hard.jsonl"), readRows(t, "reference.jsonl")...)
	for _, c := range []struct {
		pattern string
		digits  int
	}{{qwen2Pattern, 1}, {llama3Pattern, 3}, {gpt2Pattern, 0}} {
		o := newOracle(t, c.pattern, c.digits)
		bad := 0
		for _, row := range rows {
			if !o.check(t, norm.NFC.String(row.Text)) {
				bad++
			}
		}
		r := rand.New(rand.NewPCG(1, uint64(c.digits)))
		for i := 0; i < 20000 && bad < 10; i++ {
			if !o.check(t, randomText(r)) {
				bad++
			}
		}
	}
}

// FuzzSplitterMatchesRegex: as TestSplitterMatchesRegex, for any valid
// UTF-8 text (go test -fuzz FuzzSplitterMatchesRegex).
func FuzzSplitterMatchesRegex(f *testing.F) {
	for _, s := range []string{"Hello world", "  a \n\n b  ", "'S 'ſ 're", "x1234 ", "\r\n\t", "😀 中文", "a\u0085 b\ufeff "} {
		f.Add(s)
	}
	qwen2 := newOracle(f, qwen2Pattern, 1)
	llama3 := newOracle(f, llama3Pattern, 3)
	gpt2 := newOracle(f, gpt2Pattern, 0)
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			t.Skip()
		}
		qwen2.check(t, s)
		llama3.check(t, s)
		gpt2.check(t, s)
	})
}

// nfcAround is the NFC form of s as Hugging Face normalises it: each stretch
// between added tokens on its own ("<|im_end|>\u0338" keeps its ">", which
// NFC of the whole would compose to "≯").
func nfcAround(tok *Tokenizer, s string) string {
	var b strings.Builder
	start := 0
	for i := 0; i < len(s); i++ {
		for _, a := range tok.m.addedFirst[s[i]] {
			if strings.HasPrefix(s[i:], a) {
				b.WriteString(norm.NFC.String(s[start:i]))
				b.WriteString(a)
				start = i + len(a)
				i = start - 1
				break
			}
		}
	}
	b.WriteString(norm.NFC.String(s[start:]))
	return b.String()
}

// FuzzRoundTrip: for any valid UTF-8 text, Decode(Encode(text)) is the NFC
// form of the text, normalised between added tokens (go test -fuzz
// FuzzRoundTrip).
func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{"Hello world", "cafe\u0301 <|im_end|>x", "<|im_start|", "\u0958\u0344", "😀\u200d😀", "  \r\n  ", "<|im_end|>\u0338"} {
		f.Add(s)
	}
	r := rand.New(rand.NewPCG(2, 2))
	for i := 0; i < 200; i++ {
		f.Add(randomText(r))
	}
	tok := qwen(f)
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			t.Skip()
		}
		ids := tok.Encode(s)
		dec, err := tok.Decode(ids)
		if err != nil {
			t.Fatal(err)
		}
		if want := nfcAround(tok, s); string(dec) != want {
			t.Errorf("%q: Decode(Encode) = %q, want %q (ids %v)", s, dec, want, ids)
		}
	})
}
