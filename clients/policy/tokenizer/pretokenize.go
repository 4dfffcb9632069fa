package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// The Split patterns the scanner implements, as they stand in tokenizer.json.
const (
	// qwen2Pattern is Qwen2's (and Qwen2.5's, Qwen3's) Split regex.
	qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// llama3Pattern is Llama 3's: the same with up to three digits a piece.
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// gpt2Pattern is GPT-2's, the regex a ByteLevel pre-tokenizer with
	// use_regex true applies itself (Hugging Face tokenizers'
	// pre_tokenizers/byte_level.rs; SmolLM2's tokenizer.json, GPT-2's):
	// contractions in lower case only, one optional space before a run of
	// letters, of numbers (any length) or of other characters, and no
	// special case for \r and \n.
	gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// Character classes of the scanner: a character is exactly one of letter
// (\p{L}), number (\p{N}), space (\s) or other; clsCRLF marks \r and \n,
// which are spaces too.
const (
	clsOther uint8 = iota
	clsLetter
	clsNumber
	clsSpace
	clsCRLF
)

// asciiClass is the class of each ASCII byte.
var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for b := 0; b < utf8.RuneSelf; b++ {
		switch {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z':
			t[b] = clsLetter
		case b >= '0' && b <= '9':
			t[b] = clsNumber
		case b == '\r' || b == '\n':
			t[b] = clsCRLF
		case b == '\t' || b == '\v' || b == '\f' || b == ' ':
			t[b] = clsSpace
		}
	}
	return t
}()

// classAt decodes the character at the start of s (non-empty) and returns
// its class and byte length. An invalid byte is one character of class
// other, as U+FFFD would be.
func classAt(s string) (uint8, int) {
	if c := s[0]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, n := utf8.DecodeRuneInString(s)
	switch {
	case unicode.IsLetter(r):
		return clsLetter, n
	case unicode.IsNumber(r):
		return clsNumber, n
	case unicode.IsSpace(r): // Unicode White_Space: U+0085, U+00A0, Z*
		return clsSpace, n
	}
	return clsOther, n
}

// splitter cuts normalised text into the pieces that BPE encodes one by
// one.
type splitter struct {
	// maxDigits is how many \p{N} characters one piece takes (1 for Qwen2,
	// 3 for Llama 3); unused by GPT-2's pattern.
	maxDigits int
	// gpt2 selects GPT-2's pattern (gpt2Pattern) instead of Qwen2's family.
	gpt2 bool
}

// next returns the byte length of the piece at the start of s (non-empty):
// the match of the pattern's first alternative that matches there, as a
// backtracking regex engine finds it.
func (sp splitter) next(s string) int {
	if sp.gpt2 {
		return nextGPT2(s)
	}
	c0, n0 := classAt(s)
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if s[0] == '\'' {
		if n := contraction(s[1:]); n > 0 {
			return 1 + n
		}
	}
	switch c0 {
	case clsLetter: // [^\r\n\p{L}\p{N}]?\p{L}+ with the option empty
		return n0 + run(s[n0:], clsLetter, -1)
	case clsNumber: // \p{N} or \p{N}{1,3}
		return n0 + run(s[n0:], clsNumber, sp.maxDigits-1)
	}
	// [^\r\n\p{L}\p{N}]\p{L}+: a space (not \r, \n) or other character, then letters.
	if c0 != clsCRLF && len(s) > n0 {
		if c1, n1 := classAt(s[n0:]); c1 == clsLetter {
			return n0 + n1 + run(s[n0+n1:], clsLetter, -1)
		}
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	start := -1
	switch {
	case c0 == clsOther:
		start = 0
	case s[0] == ' ' && len(s) > 1:
		if c1, _ := classAt(s[1:]); c1 == clsOther {
			start = 1
		}
	}
	if start >= 0 {
		n := start + run(s[start:], clsOther, -1)
		for n < len(s) && (s[n] == '\r' || s[n] == '\n') {
			n++
		}
		return n
	}
	// c0 is a space: the run of spaces from here, and where its last \r or
	// \n ends.
	end, lastCRLF, lastLen, chars := 0, -1, 0, 0
	for end < len(s) {
		c, n := classAt(s[end:])
		if c != clsSpace && c != clsCRLF {
			break
		}
		if c == clsCRLF {
			lastCRLF = end + n
		}
		end, lastLen, chars = end+n, n, chars+1
	}
	switch {
	case lastCRLF > 0: // \s*[\r\n]+
		return lastCRLF
	case end == len(s): // \s+(?!\S) at the end of the text
		return end
	case chars >= 2: // \s+(?!\S): all but the last space, which goes with what follows
		return end - lastLen
	}
	return end // \s+
}

// nextGPT2 is next for gpt2Pattern.
func nextGPT2(s string) int {
	// 's|'t|'re|'ve|'m|'ll|'d, case-sensitive
	if s[0] == '\'' {
		for _, c := range []string{"s", "t", "re", "ve", "m", "ll", "d"} {
			if strings.HasPrefix(s[1:], c) {
				return 1 + len(c)
			}
		}
	}
	c0, n0 := classAt(s)
	//  ?\p{L}+,  ?\p{N}+,  ?[^\s\p{L}\p{N}]+: the run of c0's class, or a
	// space and the run of the next character's.
	switch c0 {
	case clsLetter, clsNumber, clsOther:
		return n0 + run(s[n0:], c0, -1)
	}
	if s[0] == ' ' && len(s) > 1 {
		if c1, n1 := classAt(s[1:]); c1 != clsSpace && c1 != clsCRLF {
			return 1 + n1 + run(s[1+n1:], c1, -1)
		}
	}
	// \s+(?!\S)|\s+: the run of spaces (\r and \n among them), less the
	// last when two or more precede a non-space.
	end, lastLen, chars := 0, 0, 0
	for end < len(s) {
		c, n := classAt(s[end:])
		if c != clsSpace && c != clsCRLF {
			break
		}
		end, lastLen, chars = end+n, n, chars+1
	}
	if end < len(s) && chars >= 2 {
		return end - lastLen
	}
	return end
}

// contraction returns the length of the contraction suffix at the start of
// s ("s", "t", "re", "ve", "m", "ll", "d" in any case; "ſ", U+017F, counts
// as s as Oniguruma's case folding has it), or 0.
func contraction(s string) int {
	if len(s) == 0 {
		return 0
	}
	// c|0x20 maps exactly the two cases of an ASCII letter to its lower case.
	switch s[0] | 0x20 {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if len(s) > 1 && s[1]|0x20 == 'e' {
			return 2
		}
	case 'l':
		if len(s) > 1 && s[1]|0x20 == 'l' {
			return 2
		}
	}
	if strings.HasPrefix(s, "ſ") {
		return len("ſ")
	}
	return 0
}

// run returns the byte length of the run of characters of class cls at the
// start of s, at most max characters (max < 0: no limit).
func run(s string, cls uint8, max int) int {
	n := 0
	for i := 0; n < len(s) && i != max; i++ {
		c, k := classAt(s[n:])
		if c != cls {
			break
		}
		n += k
	}
	return n
}
