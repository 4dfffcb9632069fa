package policy

import (
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Hot request bodies are written by hand, byte for byte as encoding/json
// writes them (the tests compare the two), without its reflection, map
// sorting and intermediate buffers.

// tokenizeBody is json.Marshal(map[string]any{"model": model, "prompt":
// text, "add_special_tokens": add}): keys sorted, HTML characters escaped.
func tokenizeBody(model, text string, add bool) json.RawMessage {
	out := make([]byte, 0, 64+len(model)+len(text)+len(text)/8)
	out = append(out, `{"add_special_tokens":`...)
	out = strconv.AppendBool(out, add)
	out = append(out, `,"model":`...)
	out = appendJSONString(out, model)
	out = append(out, `,"prompt":`...)
	out = appendJSONString(out, text)
	return append(out, '}')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as encoding/json encodes a string: quoted,
// with '"', '\\', control characters, '<', '>', '&', U+2028 and U+2029
// escaped and each invalid UTF-8 byte replaced by \ufffd.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case c == '\u2028' || c == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendJSONFloat appends f as encoding/json encodes a float64; NaN and
// infinities, which JSON cannot carry, are an error (as for json.Marshal).
func appendJSONFloat(dst []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, fmt.Errorf("unsupported value %v", f)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// e-09 becomes e-9, as encoding/json writes it.
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, nil
}

// digitPairs holds "00" to "99".
const digitPairs = "00010203040506070809" + "10111213141516171819" + "20212223242526272829" +
	"30313233343536373839" + "40414243444546474849" + "50515253545556575859" + "60616263646566676869" +
	"70717273747576777879" + "80818283848586878889" + "90919293949596979899"

// pow10u64 are the powers of ten that fit in a uint64.
var pow10u64 = [...]uint64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19}

// decimalDigits is the number of decimal digits of v (1 for 0).
func decimalDigits(v uint64) int {
	// log10(2) ~ 1233/4096: t is the digit count or one more.
	t := bits.Len64(v) * 1233 >> 12
	if v < pow10u64[t] {
		return max(t, 1)
	}
	return t + 1
}

// putDigits writes v's n decimal digits into b[:n], two at a time.
func putDigits(b []byte, v uint64, n int) {
	i := n
	for v >= 100 {
		q := v / 100
		r := 2 * (v - q*100)
		i -= 2
		b[i], b[i+1] = digitPairs[r], digitPairs[r+1]
		v = q
	}
	if v >= 10 {
		b[i-2], b[i-1] = digitPairs[2*v], digitPairs[2*v+1]
	} else {
		b[i-1] = byte('0' + v)
	}
}

// appendInt appends v in decimal, as strconv.AppendInt does, writing the
// digits in place.
func appendInt(dst []byte, v int) []byte {
	if v < 0 {
		return strconv.AppendInt(dst, int64(v), 10)
	}
	n := decimalDigits(uint64(v))
	l := len(dst)
	dst = slices.Grow(dst, n)[:l+n]
	putDigits(dst[l:], uint64(v), n)
	return dst
}

// appendInts appends ids in decimal, comma separated, as encoding/json
// writes the elements of an []int: a turn's prompt is thousands of ids, the
// bulk of a completion request.
func appendInts(dst []byte, ids []int) []byte {
	for i, v := range ids {
		if v < 0 {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendInt(dst, int64(v), 10)
			continue
		}
		n := decimalDigits(uint64(v))
		l := len(dst)
		if cap(dst)-l < n+1 {
			// Room for this id and, at 7 bytes each, the rest.
			dst = slices.Grow(dst, n+1+7*(len(ids)-i))
		}
		if i > 0 {
			dst = dst[:l+1]
			dst[l] = ','
			l++
		}
		dst = dst[:l+n]
		putDigits(dst[l:], uint64(v), n)
	}
	return dst
}
