package policy

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// decodeCompletion decodes a /v1/completions answer. Completions are the
// orchestrator's most frequent answers, and encoding/json spends most of a
// turn's decoding time on them, so valid answers of the usual shape are
// read by a small scanner that fills only what parseCompletion reads (the
// first choice); anything else goes to encoding/json, which then decides.
func decodeCompletion(raw []byte, out *completionResponse) error {
	if json.Valid(raw) {
		s := &scan{b: raw}
		if s.response(out) {
			return nil
		}
		*out = completionResponse{}
	}
	return json.Unmarshal(raw, out)
}

// scan reads a JSON document already known to be valid.
type scan struct {
	b []byte
	i int
}

func (s *scan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scan) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// null consumes a null literal if one is next.
func (s *scan) null() bool {
	if s.peek() == 'n' {
		s.i += 4
		return true
	}
	return false
}

// str reads a string; escapes are left to encoding/json.
func (s *scan) str() (string, bool) {
	if s.peek() != '"' {
		return "", false
	}
	start := s.i
	s.i++
	esc := false
	for s.i < len(s.b) && s.b[s.i] != '"' {
		if s.b[s.i] == '\\' {
			esc = true
			s.i++
		}
		s.i++
	}
	s.i++
	if !esc && utf8.Valid(s.b[start+1:s.i-1]) {
		return string(s.b[start+1 : s.i-1]), true
	}
	var v string
	if json.Unmarshal(s.b[start:s.i], &v) != nil {
		return "", false
	}
	return v, true
}

// skip passes over one value.
func (s *scan) skip() {
	switch s.peek() {
	case '"':
		s.str()
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch c := s.b[s.i]; c {
			case '"':
				s.str()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			s.i++
			if depth == 0 {
				return
			}
		}
	default:
		for s.i < len(s.b) && !isDelim(s.b[s.i]) {
			s.i++
		}
	}
}

// number returns the raw text of a number.
func (s *scan) number() (string, bool) {
	s.ws()
	start := s.i
	for s.i < len(s.b) && isNumByte(s.b[s.i]) {
		s.i++
	}
	return string(s.b[start:s.i]), s.i > start
}

// each calls f for every element of an array (false stops with failure).
func (s *scan) each(f func() bool) bool {
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

// fields calls f for every member of an object with its key.
func (s *scan) fields(f func(key string) bool) bool {
	if s.peek() != '{' {
		return false
	}
	s.i++
	if s.peek() == '}' {
		s.i++
		return true
	}
	for {
		k, ok := s.str()
		if !ok || s.peek() != ':' {
			return false
		}
		s.i++
		if !f(k) {
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

// known matches a key exactly; a key that encoding/json would match
// case-insensitively makes the scan give up.
func known(key string, names ...string) (string, bool) {
	for _, n := range names {
		if key == n {
			return n, true
		}
		if strings.EqualFold(key, n) {
			return "", false
		}
	}
	return "", true
}

func (s *scan) ints() ([]int, bool) {
	out := []int{}
	ok := s.each(func() bool {
		n, ok := s.number()
		v, err := strconv.Atoi(n)
		out = append(out, v)
		return ok && err == nil
	})
	return out, ok
}

func (s *scan) response(out *completionResponse) bool {
	return s.fields(func(key string) bool {
		k, ok := known(key, "choices")
		if !ok {
			return false
		}
		if k == "" {
			s.skip()
			return true
		}
		if s.null() {
			out.Choices = nil
			return true
		}
		out.Choices = out.Choices[:0]
		first := true
		return s.each(func() bool {
			if !first {
				s.skip()
				return true
			}
			first = false
			out.Choices = append(out.Choices, completionChoice{})
			return s.choice(&out.Choices[0])
		}) && len(out.Choices) > 0
	})
}

func (s *scan) choice(ch *completionChoice) bool {
	return s.fields(func(key string) bool {
		k, ok := known(key, "text", "finish_reason", "stop_reason", "token_ids", "logprobs")
		if !ok {
			return false
		}
		switch k {
		case "text":
			if s.null() {
				return true
			}
			v, ok := s.str()
			ch.Text = v
			return ok
		case "finish_reason":
			if s.null() {
				ch.FinishReason = nil
				return true
			}
			v, ok := s.str()
			ch.FinishReason = &v
			return ok
		case "stop_reason":
			s.ws()
			start := s.i
			s.skip()
			ch.StopReason = append(json.RawMessage(nil), s.b[start:s.i]...)
			return true
		case "token_ids":
			if s.null() {
				ch.TokenIDs = nil
				return true
			}
			v, ok := s.ints()
			ch.TokenIDs = v
			return ok
		case "logprobs":
			if s.null() {
				ch.Logprobs = nil
				return true
			}
			ch.Logprobs = &completionLogprobs{}
			lp := ch.Logprobs
			return s.fields(func(key string) bool {
				k, ok := known(key, "tokens", "token_logprobs", "text_offset")
				if !ok {
					return false
				}
				switch k {
				case "tokens":
					if s.null() {
						lp.Tokens = nil
						return true
					}
					lp.Tokens = []string{}
					return s.each(func() bool {
						v, ok := s.str()
						lp.Tokens = append(lp.Tokens, v)
						return ok
					})
				case "token_logprobs":
					if s.null() {
						lp.TokenLogprobs = nil
						return true
					}
					lp.TokenLogprobs = []*float64{}
					vals := []float64{}
					var nulls []bool
					ok := s.each(func() bool {
						if s.null() {
							vals = append(vals, 0)
							nulls = append(nulls, true)
							return true
						}
						n, ok := s.number()
						v, err := strconv.ParseFloat(n, 64)
						vals = append(vals, v)
						nulls = append(nulls, false)
						return ok && err == nil
					})
					for i := range vals {
						if nulls[i] {
							lp.TokenLogprobs = append(lp.TokenLogprobs, nil)
						} else {
							lp.TokenLogprobs = append(lp.TokenLogprobs, &vals[i])
						}
					}
					return ok
				case "text_offset":
					if s.null() {
						lp.TextOffset = nil
						return true
					}
					v, ok := s.ints()
					lp.TextOffset = v
					return ok
				}
				s.skip()
				return true
			})
		}
		s.skip()
		return true
	})
}

func isDelim(c byte) bool {
	switch c {
	case ',', ']', '}', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

func isNumByte(c byte) bool {
	return c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}
