// Package jsonscan is a one-pass JSON reader for the answers the clients
// read most often (policy completions and tokenizations, retriever hits):
// it validates the whole document as it goes and hands values straight to
// the caller, without reflection or an intermediate tree. It accepts only
// what it can read exactly as encoding/json would; at anything else a
// method returns false and the caller leaves the document to
// encoding/json, which decides (the callers' fuzz tests hold the two to
// the same results).
package jsonscan

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// New returns a Scanner at the start of b.
func New(b []byte) Scanner { return Scanner{b: b} }

// SeenOnce records key number k (below 16) of a set in seen and reports
// whether it is new: a duplicate key sends a document to encoding/json.
func SeenOnce(seen *uint16, k int) bool {
	bit := uint16(1) << k
	if *seen&bit != 0 {
		return false
	}
	*seen |= bit
	return true
}

// Match returns the index of key among names, -1 for a key encoding/json
// would ignore, -2 for one it might match case-insensitively (or that is
// escaped) and the scanner leaves to it.
func Match(key []byte, names ...string) int {
	for i, n := range names {
		if string(key) == n {
			return i
		}
	}
	for _, c := range key {
		if c == '\\' || c >= utf8.RuneSelf {
			return -2
		}
	}
	for _, n := range names {
		if strings.EqualFold(string(key), n) {
			return -2
		}
	}
	return -1
}

// Scanner reads a JSON document and validates everything it passes,
// skipped values included. Every method returns false at the first thing
// it does not accept.
type Scanner struct {
	b []byte
	i int
}

// maxDepth bounds the nesting the scanner skips.
const maxDepth = 64

func (s *Scanner) ws() {
	for s.i < len(s.b) && s.b[s.i] <= ' ' {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// Peek returns the next byte after white space (0 at the end).
func (s *Scanner) Peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// End reports whether only white space is left.
func (s *Scanner) End() bool {
	s.ws()
	return s.i == len(s.b)
}

// Lit consumes the literal word if it is next.
func (s *Scanner) Lit(word string) bool {
	s.ws()
	if len(s.b)-s.i >= len(word) && string(s.b[s.i:s.i+len(word)]) == word {
		s.i += len(word)
		return true
	}
	return false
}

// Null consumes a null if one is next.
func (s *Scanner) Null() bool { return s.Peek() == 'n' && s.Lit("null") }

// Object reads an object, calling f with each key when the scanner stands
// on the member's value.
func (s *Scanner) Object(f func(key []byte) bool) bool {
	if s.Peek() != '{' {
		return false
	}
	s.i++
	if s.Peek() == '}' {
		s.i++
		return true
	}
	for {
		key, ok := s.RawStr()
		if !ok || s.Peek() != ':' {
			return false
		}
		s.i++
		if !f(key) {
			return false
		}
		switch s.Peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return true
		default:
			return false
		}
	}
}

// Array reads an array, calling f for each element.
func (s *Scanner) Array(f func() bool) bool {
	if s.Peek() != '[' {
		return false
	}
	s.i++
	if s.Peek() == ']' {
		s.i++
		return true
	}
	for {
		if !f() {
			return false
		}
		switch s.Peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return true
		default:
			return false
		}
	}
}

// RawStr reads a string and returns its bytes between the quotes,
// escapes as they are.
func (s *Scanner) RawStr() ([]byte, bool) {
	if s.Peek() != '"' {
		return nil, false
	}
	start := s.i + 1
	for i := start; i < len(s.b); i++ {
		c := s.b[i]
		if plainStrByte[c] {
			continue
		}
		switch {
		case c == '"':
			s.i = i + 1
			return s.b[start:i], true
		case c < 0x20:
			return nil, false
		case c == '\\':
			i++
			if i >= len(s.b) {
				return nil, false
			}
			switch s.b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(s.b) {
					return nil, false
				}
				for _, h := range s.b[i+1 : i+5] {
					if !isHex(h) {
						return nil, false
					}
				}
				i += 4
			default:
				return nil, false
			}
		}
	}
	return nil, false
}

// Str reads a string value as encoding/json decodes it: escapes are
// resolved here (Go servers write '<' as \u003c), surrogate pairs and
// invalid UTF-8 by encoding/json.
func (s *Scanner) Str() (string, bool) {
	start := s.i
	raw, ok := s.RawStr()
	if !ok {
		return "", false
	}
	simple := true
	esc := false
	for _, c := range raw {
		if c >= utf8.RuneSelf {
			simple = false
		} else if c == '\\' {
			esc = true
		}
	}
	if !simple && !utf8.Valid(raw) {
		return s.jsonStr(start)
	}
	if !esc {
		return string(raw), true
	}
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		switch raw[i] {
		case '"', '\\', '/':
			out = append(out, raw[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		default: // 'u'
			r := rune(hexVal(raw[i+1])<<12 | hexVal(raw[i+2])<<8 | hexVal(raw[i+3])<<4 | hexVal(raw[i+4]))
			if utf16.IsSurrogate(r) {
				// Pairs, and the replacement of lone halves, are
				// encoding/json's.
				return s.jsonStr(start)
			}
			out = utf8.AppendRune(out, r)
			i += 4
		}
	}
	return string(out), true
}

// jsonStr decodes the string token that starts at start with encoding/json.
func (s *Scanner) jsonStr(start int) (string, bool) {
	var v string
	if json.Unmarshal(s.b[start:s.i], &v) != nil {
		return "", false
	}
	return v, true
}

// Number reads a number in JSON's grammar and returns its text; integer
// is false when it has a fraction or an exponent.
func (s *Scanner) Number() (text []byte, integer, ok bool) {
	s.ws()
	b, i := s.b, s.i
	start := i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return nil, false, false
	}
	integer = true
	if i < len(b) && b[i] == '.' {
		integer = false
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return nil, false, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		integer = false
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return nil, false, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	s.i = i
	return b[start:i], integer, true
}

// Int reads an integer as encoding/json decodes it into an int (at most 18
// digits here: the scanner leaves larger ones, and fractions and
// exponents, to it).
func (s *Scanner) Int() (int, bool) {
	s.ws()
	b, i := s.b, s.i
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	start, v := i, 0
	for i < len(b) && isDigit(b[i]) {
		v = v*10 + int(b[i]-'0')
		i++
	}
	n := i - start
	if n == 0 || n > 18 || n > 1 && b[start] == '0' ||
		i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		return 0, false
	}
	if neg {
		v = -v
	}
	s.i = i
	return v, true
}

// Float reads a number as encoding/json decodes it into a float64.
func (s *Scanner) Float() (float64, bool) {
	text, _, ok := s.Number()
	if !ok {
		return 0, false
	}
	if v, ok := exactFloat(text); ok {
		return v, true
	}
	// The text is only read by ParseFloat, which copies it into any error
	// it returns.
	v, err := strconv.ParseFloat(unsafe.String(&text[0], len(text)), 64)
	return v, err == nil
}

// pow10 are the powers of ten a float64 holds exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// exactFloat parses a number in JSON's grammar when its decimal mantissa
// fits in 52 bits and its power of ten is at most 22 either way: then one
// IEEE multiplication or division of two exact values rounds correctly,
// so the result is strconv.ParseFloat's (this is strconv's own exact fast
// path, without its generic reader). ok is false otherwise.
func exactFloat(text []byte) (float64, bool) {
	i, neg := 0, false
	if text[0] == '-' {
		neg, i = true, 1
	}
	var mant uint64
	digits, exp := 0, 0
	for ; i < len(text) && isDigit(text[i]); i++ {
		if mant != 0 || text[i] != '0' {
			digits++
		}
		mant = mant*10 + uint64(text[i]-'0')
	}
	if i < len(text) && text[i] == '.' {
		for i++; i < len(text) && isDigit(text[i]); i++ {
			if mant != 0 || text[i] != '0' {
				digits++
			}
			mant = mant*10 + uint64(text[i]-'0')
			exp--
		}
	}
	if digits > 16 || mant>>52 != 0 {
		return 0, false
	}
	if i < len(text) { // an exponent
		i++
		eneg := false
		if text[i] == '+' || text[i] == '-' {
			eneg = text[i] == '-'
			i++
		}
		e := 0
		for ; i < len(text); i++ {
			if e > 1000 {
				return 0, false
			}
			e = e*10 + int(text[i]-'0')
		}
		if eneg {
			e = -e
		}
		exp += e
	}
	f := float64(mant)
	if neg {
		f = -f
	}
	switch {
	case exp == 0:
		return f, true
	case exp > 0 && exp <= 22:
		if f > 1e15 || f < -1e15 {
			return 0, false
		}
		return f * pow10[exp], true
	case exp < 0 && exp >= -22:
		return f / pow10[-exp], true
	}
	return 0, false
}

// Skip passes over one value of any kind, validating it.
func (s *Scanner) Skip() bool { return s.skip(0) }

func (s *Scanner) skip(depth int) bool {
	switch c := s.Peek(); {
	case c == '{':
		if depth >= maxDepth {
			return false
		}
		s.i++
		if s.Peek() == '}' {
			s.i++
			return true
		}
		for {
			if _, ok := s.RawStr(); !ok || s.Peek() != ':' {
				return false
			}
			s.i++
			if !s.skip(depth + 1) {
				return false
			}
			switch s.Peek() {
			case ',':
				s.i++
			case '}':
				s.i++
				return true
			default:
				return false
			}
		}
	case c == '[':
		if depth >= maxDepth {
			return false
		}
		more, ok := s.Open()
		for ok && more {
			if !s.skip(depth + 1) {
				return false
			}
			more, ok = s.Next()
		}
		return ok
	case c == '"':
		_, ok := s.RawStr()
		return ok
	case c == 't':
		return s.Lit("true")
	case c == 'f':
		return s.Lit("false")
	case c == 'n':
		return s.Lit("null")
	default:
		_, _, ok := s.Number()
		return ok
	}
}

// Open reads the '[' of an array; more is false for an empty one.
func (s *Scanner) Open() (more, ok bool) {
	if s.Peek() != '[' {
		return false, false
	}
	s.i++
	if s.Peek() == ']' {
		s.i++
		return false, true
	}
	return true, true
}

// Next reads what follows an array element: ',' (more) or ']'.
func (s *Scanner) Next() (more, ok bool) {
	switch s.Peek() {
	case ',':
		s.i++
		return true, true
	case ']':
		s.i++
		return false, true
	}
	return false, false
}

// The array readers below are the hot loops (hundreds of elements an
// answer), written without a function value per element.

// Ints appends an array of integers, each read as int reads it, to dst.
func (s *Scanner) Ints(dst []int) ([]int, bool) {
	more, ok := s.Open()
	for ok && more {
		var v int
		if v, ok = s.Int(); !ok {
			break
		}
		dst = append(dst, v)
		more, ok = s.Next()
	}
	return dst, ok
}

// Floats appends an array of numbers, each read as float reads it, to dst.
func (s *Scanner) Floats(dst []float64) ([]float64, bool) {
	more, ok := s.Open()
	for ok && more {
		var v float64
		if v, ok = s.Float(); !ok {
			break
		}
		dst = append(dst, v)
		more, ok = s.Next()
	}
	return dst, ok
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// plainStrByte marks the bytes that stand for themselves inside a JSON
// string: all but '"', '\\' and control characters.
var plainStrByte = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= 0x20 && c != '"' && c != '\\'
	}
	return t
}()

// hexVal is the value of a hex digit already validated.
func hexVal(c byte) int {
	switch {
	case c <= '9':
		return int(c - '0')
	case c >= 'a':
		return int(c-'a') + 10
	}
	return int(c-'A') + 10
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}
