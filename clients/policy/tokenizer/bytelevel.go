package tokenizer

import (
	"fmt"
	"unicode/utf8"
)

// byteLevel is GPT-2's byte-to-character table (bytes_to_unicode): the
// printable bytes '!'..'~', '¡'..'¬' and '®'..'ÿ' stand for themselves, the
// other 68 take the code points from U+0100 up, in byte order.
type byteLevel struct {
	char   [256]rune
	byteOf map[rune]byte
}

func newByteLevel() *byteLevel {
	bl := &byteLevel{byteOf: make(map[rune]byte, 256)}
	n := rune(0)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			bl.char[b] = rune(b)
		} else {
			bl.char[b] = 256 + n
			n++
		}
		bl.byteOf[bl.char[b]] = byte(b)
	}
	return bl
}

// decode turns a vocabulary entry written in byte-level characters back
// into the bytes it stands for.
func (bl *byteLevel) decode(s string) ([]byte, error) {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		b, ok := bl.byteOf[r]
		if !ok {
			return nil, fmt.Errorf("%q is not byte-level text (character %U)", s, r)
		}
		out = append(out, b)
	}
	return out, nil
}

// encode writes bytes as byte-level characters (the form of vocabulary
// entries and merges in tokenizer.json).
func (bl *byteLevel) encode(b []byte) string {
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = utf8.AppendRune(out, bl.char[c])
	}
	return string(out)
}
