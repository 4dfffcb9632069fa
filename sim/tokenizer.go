package sim

import (
	"sort"
	"strings"
	"unicode/utf8"
)

// Special tokens of the simulated tokenizer (Qwen2.5-like names).
const (
	TokEndOfText = "<|endoftext|>"
	TokIMStart   = "<|im_start|>"
	TokIMEnd     = "<|im_end|>"
)

var specials = []string{TokEndOfText, TokIMStart, TokIMEnd}

// Tokenizer is the simulator's deterministic word-piece tokenizer. Its
// vocabulary is: the special tokens, then the 256 byte tokens, then every
// piece seen in the texts it was built from, sorted. Text that is not in the
// vocabulary falls back to byte tokens, so Decode(Encode(s)) == s for every
// string. Like a real BPE tokenizer, Encode(a)+Encode(b) need not equal
// Encode(a+b).
type Tokenizer struct {
	pieces []string
	ids    map[string]int
	// byteBase is the id of byte token 0.
	byteBase int
	// raw holds each piece's bytes (TokenBytes).
	raw [][]byte
}

// NewTokenizer builds the vocabulary from texts.
func NewTokenizer(texts ...string) *Tokenizer {
	seen := map[string]struct{}{}
	for _, t := range texts {
		splitPieces(t, func(p string) { seen[p] = struct{}{} })
	}
	for _, s := range specials {
		delete(seen, s)
	}
	words := make([]string, 0, len(seen))
	for p := range seen {
		words = append(words, p)
	}
	sort.Strings(words)
	tk := &Tokenizer{ids: make(map[string]int, len(words)+300)}
	for _, s := range specials {
		tk.add(s)
	}
	tk.byteBase = len(tk.pieces)
	for b := 0; b < 256; b++ {
		tk.pieces = append(tk.pieces, string([]byte{byte(b)}))
	}
	for _, w := range words {
		if len(w) == 1 && w[0] < 0x80 {
			// Single ASCII bytes are the byte tokens themselves.
			continue
		}
		tk.add(w)
	}
	for b := 0; b < 0x80; b++ {
		tk.ids[string([]byte{byte(b)})] = tk.byteBase + b
	}
	tk.raw = rawPieces(tk.pieces)
	return tk
}

func (tk *Tokenizer) add(p string) {
	tk.ids[p] = len(tk.pieces)
	tk.pieces = append(tk.pieces, p)
}

// VocabSize is the number of token ids.
func (tk *Tokenizer) VocabSize() int { return len(tk.pieces) }

// ID returns the id of a special token or vocabulary piece.
func (tk *Tokenizer) ID(piece string) (int, bool) {
	id, ok := tk.ids[piece]
	return id, ok
}

// Encode tokenizes text. Special-token strings in text become special tokens.
func (tk *Tokenizer) Encode(text string) []int {
	return tk.AppendEncode(make([]int, 0, len(text)/4+1), text)
}

// Decode turns token ids back into text; an out-of-range id decodes to the
// empty string and ok is false.
func (tk *Tokenizer) Decode(ids []int) (string, bool) {
	var b strings.Builder
	ok := true
	for _, id := range ids {
		if id < 0 || id >= len(tk.pieces) {
			ok = false
			continue
		}
		b.WriteString(tk.pieces[id])
	}
	return b.String(), ok
}

// Piece returns the text of one token id ("" when out of range).
func (tk *Tokenizer) Piece(id int) string {
	if id < 0 || id >= len(tk.pieces) {
		return ""
	}
	return tk.pieces[id]
}

// IsSpecial reports whether id is a special token.
func (tk *Tokenizer) IsSpecial(id int) bool { return id >= 0 && id < len(specials) }

func isLetter(r rune) bool { return r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') }

// splitPieces cuts text into pieces: special tokens; an optional single
// space followed by a run of ASCII letters; single digits; runs of newlines;
// runs of spaces (leaving a last space for a following word); any other
// single rune.
func splitPieces(text string, emit func(string)) {
	i := 0
	for i < len(text) {
		if text[i] == '<' && i+1 < len(text) && text[i+1] == '|' {
			matched := false
			for _, s := range specials {
				if strings.HasPrefix(text[i:], s) {
					emit(s)
					i += len(s)
					matched = true
					break
				}
			}
			if matched {
				continue
			}
		}
		c := text[i]
		switch {
		case c == ' ' && i+1 < len(text) && isLetter(rune(text[i+1])):
			j := i + 1
			for j < len(text) && isLetter(rune(text[j])) {
				j++
			}
			emit(text[i:j])
			i = j
		case isLetter(rune(c)):
			j := i
			for j < len(text) && isLetter(rune(text[j])) {
				j++
			}
			emit(text[i:j])
			i = j
		case c >= '0' && c <= '9':
			emit(text[i : i+1])
			i++
		case c == '\n':
			j := i
			for j < len(text) && text[j] == '\n' {
				j++
			}
			emit(text[i:j])
			i = j
		case c == ' ':
			j := i
			for j < len(text) && text[j] == ' ' {
				j++
			}
			if j < len(text) && isLetter(rune(text[j])) && j-i > 1 {
				j--
			}
			emit(text[i:j])
			i = j
		default:
			r, n := utf8.DecodeRuneInString(text[i:])
			if r == utf8.RuneError && n <= 1 {
				emit(text[i : i+1])
				i++
				continue
			}
			emit(text[i : i+n])
			i += n
		}
	}
}
