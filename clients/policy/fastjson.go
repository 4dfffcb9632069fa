package policy

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// The answers the orchestrator reads most often, /v1/completions (every
// policy turn) and /tokenize (every search), are read by a one-pass
// scanner that validates the whole document as it goes and fills the
// result directly: sampled ids are parsed from the "token_id:<id>" strings
// in place and logprobs straight into a []float64, so a turn's answer costs
// a handful of allocations instead of one per token. The scanner accepts
// only what it can read exactly as encoding/json (plus parseCompletion)
// would; anything else (escaped keys, keys differing from the known ones
// only in case, duplicate keys, several choices, nulls where a value is
// needed, any value encoding/json would reject or decode differently) makes
// it give up, and encoding/json decides. The fuzz tests hold the two to
// the same results.

// decodeCompletion reads a /v1/completions answer into a Completion. A
// body that is not JSON of the answer's shape is an error (the transport
// retries it as a malformed answer); a well-formed answer that
// parseCompletion rejects comes back as bad, with the reason.
func decodeCompletion(raw []byte) (c *Completion, bad error, err error) {
	if c, ok := scanCompletion(raw); ok {
		return c, nil, nil
	}
	var resp completionResponse
	if err := json.Unmarshal(raw, &resp); err != nil {
		return nil, nil, err
	}
	c, bad = parseCompletion(&resp)
	return c, bad, nil
}

// decodeTokens reads the ids of a /tokenize answer; any shape the scanner
// leaves goes to encoding/json, whose errors are returned.
func decodeTokens(raw []byte) ([]int, error) {
	if ids, ok := scanTokens(raw); ok {
		return ids, nil
	}
	var resp tokenizeResponse
	if err := json.Unmarshal(raw, &resp); err != nil {
		return nil, err
	}
	if resp.Tokens == nil {
		return nil, errors.New(`no "tokens" array`)
	}
	return resp.Tokens, nil
}

// scanCompletion is the fast path of decodeCompletion: ok is false when
// encoding/json and parseCompletion must decide.
func scanCompletion(raw []byte) (*Completion, bool) {
	s := scanner{b: raw}
	var ch choiceScan
	nChoices, seen := 0, false
	ok := s.object(func(key []byte) bool {
		switch k := match(key, "choices"); k {
		case 0:
			if seen { // a duplicate key
				return false
			}
			seen = true
			return s.array(func() bool {
				nChoices++
				return nChoices == 1 && ch.scan(&s)
			}) && nChoices == 1
		case -1:
			return s.skip(0)
		}
		return false
	}) && s.end()
	if !ok {
		return nil, false
	}
	return ch.completion()
}

// choiceScan is what scanCompletion reads of the first choice.
type choiceScan struct {
	seen                                 uint16
	text                                 string
	finish, stop                         string
	stopID                               int
	hasStop, hasStopID                   bool
	tokenIDs, tokens, offsets            []int
	hasTokenIDs, hasLogprobs, hasOffsets bool
	logprobs                             []float64
}

// seenOnce records key number k of a set and reports whether it is new.
func seenOnce(seen *uint16, k int) bool {
	bit := uint16(1) << k
	if *seen&bit != 0 {
		return false
	}
	*seen |= bit
	return true
}

func (c *choiceScan) scan(s *scanner) bool {
	return s.object(func(key []byte) bool {
		k := match(key, "text", "finish_reason", "stop_reason", "token_ids", "logprobs")
		if k == -1 {
			return s.skip(0)
		}
		if k < 0 || !seenOnce(&c.seen, k) {
			return false
		}
		switch k {
		case 0:
			if s.null() {
				return true
			}
			v, ok := s.str()
			c.text = v
			return ok
		case 1:
			if s.null() {
				return true
			}
			v, ok := s.str()
			c.finish = v
			return ok
		case 2:
			switch {
			case s.null():
				return true
			case s.peek() == '"':
				v, ok := s.str()
				c.stop, c.hasStop = v, true
				return ok
			}
			v, ok := s.int()
			c.stopID, c.hasStopID = v, true
			return ok
		case 3:
			if s.null() {
				return true
			}
			c.hasTokenIDs = true
			var ok bool
			c.tokenIDs, ok = s.ints(make([]int, 0, 64))
			return ok
		case 4:
			// A null or missing logprobs object is parseCompletion's error.
			c.hasLogprobs = true
			return c.scanLogprobs(s)
		}
		return false
	})
}

func (c *choiceScan) scanLogprobs(s *scanner) bool {
	var seen uint16
	return s.object(func(key []byte) bool {
		k := match(key, "tokens", "token_logprobs", "text_offset")
		if k == -1 {
			return s.skip(0)
		}
		if k < 0 || !seenOnce(&seen, k) {
			return false
		}
		switch k {
		case 0:
			if s.null() {
				return true
			}
			var ok bool
			c.tokens, ok = s.tokenIDs(make([]int, 0, 64))
			return ok
		case 1:
			if s.null() {
				return true
			}
			var ok bool
			c.logprobs, ok = s.floats(make([]float64, 0, 64))
			return ok
		case 2:
			if s.null() {
				return true
			}
			c.hasOffsets = true
			var ok bool
			c.offsets, ok = s.ints(make([]int, 0, 64))
			return ok
		}
		return false
	})
}

// completion applies parseCompletion's rules; ok is false wherever
// parseCompletion would fail.
func (c *choiceScan) completion() (*Completion, bool) {
	if !c.hasLogprobs {
		return nil, false
	}
	ids := c.tokens
	if ids == nil {
		ids = []int{}
	}
	if c.hasTokenIDs {
		if len(c.tokenIDs) != len(ids) {
			return nil, false
		}
		ids = c.tokenIDs
	}
	if len(c.logprobs) != len(ids) || c.hasOffsets && len(c.offsets) != len(ids) {
		return nil, false
	}
	lps := c.logprobs
	if lps == nil {
		lps = []float64{}
	}
	out := &Completion{Text: c.text, TokenIDs: ids, Logprobs: lps, FinishReason: c.finish}
	if c.hasOffsets {
		out.TextOffsets = c.offsets
	}
	if c.hasStop {
		out.StopReason = c.stop
	}
	if c.hasStopID {
		id := c.stopID
		out.StopTokenID = &id
	}
	return out, true
}

// scanTokens is the fast path of decodeTokens.
func scanTokens(raw []byte) ([]int, bool) {
	s := scanner{b: raw}
	var ids []int
	var seen uint16
	ok := s.object(func(key []byte) bool {
		k := match(key, "count", "max_model_len", "tokens")
		if k == -1 {
			return s.skip(0)
		}
		if k < 0 || !seenOnce(&seen, k) {
			return false
		}
		if s.null() {
			return k != 2 // null tokens: decodeTokens' error
		}
		if k < 2 {
			_, ok := s.int()
			return ok
		}
		var ok bool
		ids, ok = s.ints(make([]int, 0, 256))
		return ok
	}) && s.end()
	return ids, ok && ids != nil
}

// match returns the index of key among names, -1 for a key encoding/json
// would ignore, -2 for one it might match case-insensitively (or that is
// escaped) and the scanner leaves to it.
func match(key []byte, names ...string) int {
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

// scanner reads a JSON document and validates everything it passes,
// skipped values included. Every method returns false at the first thing
// it does not accept.
type scanner struct {
	b []byte
	i int
}

// maxDepth bounds the nesting the scanner skips.
const maxDepth = 64

func (s *scanner) ws() {
	for s.i < len(s.b) && s.b[s.i] <= ' ' {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next byte after white space (0 at the end).
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// end reports whether only white space is left.
func (s *scanner) end() bool {
	s.ws()
	return s.i == len(s.b)
}

// lit consumes the literal word if it is next.
func (s *scanner) lit(word string) bool {
	s.ws()
	if len(s.b)-s.i >= len(word) && string(s.b[s.i:s.i+len(word)]) == word {
		s.i += len(word)
		return true
	}
	return false
}

// null consumes a null if one is next.
func (s *scanner) null() bool { return s.peek() == 'n' && s.lit("null") }

// object reads an object, calling f with each key when the scanner stands
// on the member's value.
func (s *scanner) object(f func(key []byte) bool) bool {
	if s.peek() != '{' {
		return false
	}
	s.i++
	if s.peek() == '}' {
		s.i++
		return true
	}
	for {
		key, ok := s.rawStr()
		if !ok || s.peek() != ':' {
			return false
		}
		s.i++
		if !f(key) {
			return false
		}
		switch s.peek() {
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

// array reads an array, calling f for each element.
func (s *scanner) array(f func() bool) bool {
	if s.peek() != '[' {
		return false
	}
	s.i++
	if s.peek() == ']' {
		s.i++
		return true
	}
	for {
		if !f() {
			return false
		}
		switch s.peek() {
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

// rawStr reads a string and returns its bytes between the quotes,
// escapes as they are.
func (s *scanner) rawStr() ([]byte, bool) {
	if s.peek() != '"' {
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

// str reads a string value as encoding/json decodes it: escapes are
// resolved here (Go servers write '<' as \u003c), surrogate pairs and
// invalid UTF-8 by encoding/json.
func (s *scanner) str() (string, bool) {
	start := s.i
	raw, ok := s.rawStr()
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
func (s *scanner) jsonStr(start int) (string, bool) {
	var v string
	if json.Unmarshal(s.b[start:s.i], &v) != nil {
		return "", false
	}
	return v, true
}

// number reads a number in JSON's grammar and returns its text; integer
// is false when it has a fraction or an exponent.
func (s *scanner) number() (text []byte, integer, ok bool) {
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

// int reads an integer as encoding/json decodes it into an int (at most 18
// digits here: the scanner leaves larger ones, and fractions and
// exponents, to it).
func (s *scanner) int() (int, bool) {
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

// float reads a number as encoding/json decodes it into a float64.
func (s *scanner) float() (float64, bool) {
	text, _, ok := s.number()
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

// tokenID reads a "token_id:<id>" string as parseTokenID reads it (plain
// decimal digits only here; other forms are left to it).
func (s *scanner) tokenID() (int, bool) {
	raw, ok := s.rawStr()
	const prefix = "token_id:"
	if !ok || len(raw) <= len(prefix) || len(raw) > len(prefix)+18 || string(raw[:len(prefix)]) != prefix {
		return 0, false
	}
	v := 0
	for _, c := range raw[len(prefix):] {
		if !isDigit(c) {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

// skip passes over one value of any kind, validating it.
func (s *scanner) skip(depth int) bool {
	switch c := s.peek(); {
	case c == '{':
		if depth >= maxDepth {
			return false
		}
		s.i++
		if s.peek() == '}' {
			s.i++
			return true
		}
		for {
			if _, ok := s.rawStr(); !ok || s.peek() != ':' {
				return false
			}
			s.i++
			if !s.skip(depth + 1) {
				return false
			}
			switch s.peek() {
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
		more, ok := s.open()
		for ok && more {
			if !s.skip(depth + 1) {
				return false
			}
			more, ok = s.next()
		}
		return ok
	case c == '"':
		_, ok := s.rawStr()
		return ok
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	default:
		_, _, ok := s.number()
		return ok
	}
}

// open reads the '[' of an array; more is false for an empty one.
func (s *scanner) open() (more, ok bool) {
	if s.peek() != '[' {
		return false, false
	}
	s.i++
	if s.peek() == ']' {
		s.i++
		return false, true
	}
	return true, true
}

// next reads what follows an array element: ',' (more) or ']'.
func (s *scanner) next() (more, ok bool) {
	switch s.peek() {
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

// ints appends an array of integers, each read as int reads it, to dst.
func (s *scanner) ints(dst []int) ([]int, bool) {
	more, ok := s.open()
	for ok && more {
		var v int
		if v, ok = s.int(); !ok {
			break
		}
		dst = append(dst, v)
		more, ok = s.next()
	}
	return dst, ok
}

// floats appends an array of numbers, each read as float reads it, to dst.
func (s *scanner) floats(dst []float64) ([]float64, bool) {
	more, ok := s.open()
	for ok && more {
		var v float64
		if v, ok = s.float(); !ok {
			break
		}
		dst = append(dst, v)
		more, ok = s.next()
	}
	return dst, ok
}

// tokenIDs appends an array of "token_id:<id>" strings, each read as
// tokenID reads it, to dst.
func (s *scanner) tokenIDs(dst []int) ([]int, bool) {
	more, ok := s.open()
	for ok && more {
		var v int
		if v, ok = s.tokenID(); !ok {
			break
		}
		dst = append(dst, v)
		more, ok = s.next()
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
