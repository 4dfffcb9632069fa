package policy

import (
	"encoding/json"
	"errors"

	"github.com/hindsearch/hindsearch/clients/internal/jsonscan"
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
	return decodeCompletionStd(raw)
}

// decodeCompletionStd is decodeCompletion with encoding/json alone.
func decodeCompletionStd(raw []byte) (c *Completion, bad error, err error) {
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
	return decodeTokensStd(raw)
}

// decodeTokensStd is decodeTokens with encoding/json alone.
func decodeTokensStd(raw []byte) ([]int, error) {
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
	s := jsonscan.New(raw)
	var ch choiceScan
	nChoices, seen := 0, false
	ok := s.Object(func(key []byte) bool {
		switch k := jsonscan.Match(key, "choices"); k {
		case 0:
			if seen { // a duplicate key
				return false
			}
			seen = true
			return s.Array(func() bool {
				nChoices++
				return nChoices == 1 && ch.scan(&s)
			}) && nChoices == 1
		case -1:
			return s.Skip()
		}
		return false
	}) && s.End()
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

func (c *choiceScan) scan(s *jsonscan.Scanner) bool {
	return s.Object(func(key []byte) bool {
		k := jsonscan.Match(key, "text", "finish_reason", "stop_reason", "token_ids", "logprobs")
		if k == -1 {
			return s.Skip()
		}
		if k < 0 || !jsonscan.SeenOnce(&c.seen, k) {
			return false
		}
		switch k {
		case 0:
			if s.Null() {
				return true
			}
			v, ok := s.Str()
			c.text = v
			return ok
		case 1:
			if s.Null() {
				return true
			}
			v, ok := s.Str()
			c.finish = v
			return ok
		case 2:
			switch {
			case s.Null():
				return true
			case s.Peek() == '"':
				v, ok := s.Str()
				c.stop, c.hasStop = v, true
				return ok
			}
			v, ok := s.Int()
			c.stopID, c.hasStopID = v, true
			return ok
		case 3:
			if s.Null() {
				return true
			}
			c.hasTokenIDs = true
			var ok bool
			c.tokenIDs, ok = s.Ints(make([]int, 0, 64))
			return ok
		case 4:
			// A null or missing logprobs object is parseCompletion's error.
			c.hasLogprobs = true
			return c.scanLogprobs(s)
		}
		return false
	})
}

func (c *choiceScan) scanLogprobs(s *jsonscan.Scanner) bool {
	var seen uint16
	return s.Object(func(key []byte) bool {
		k := jsonscan.Match(key, "tokens", "token_logprobs", "text_offset")
		if k == -1 {
			return s.Skip()
		}
		if k < 0 || !jsonscan.SeenOnce(&seen, k) {
			return false
		}
		switch k {
		case 0:
			if s.Null() {
				return true
			}
			var ok bool
			c.tokens, ok = tokenIDs(s, make([]int, 0, 64))
			return ok
		case 1:
			if s.Null() {
				return true
			}
			var ok bool
			c.logprobs, ok = s.Floats(make([]float64, 0, 64))
			return ok
		case 2:
			if s.Null() {
				return true
			}
			c.hasOffsets = true
			var ok bool
			c.offsets, ok = s.Ints(make([]int, 0, 64))
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
	s := jsonscan.New(raw)
	var ids []int
	var seen uint16
	ok := s.Object(func(key []byte) bool {
		k := jsonscan.Match(key, "count", "max_model_len", "tokens")
		if k == -1 {
			return s.Skip()
		}
		if k < 0 || !jsonscan.SeenOnce(&seen, k) {
			return false
		}
		if s.Null() {
			return k != 2 // null tokens: decodeTokens' error
		}
		if k < 2 {
			_, ok := s.Int()
			return ok
		}
		var ok bool
		ids, ok = s.Ints(make([]int, 0, 256))
		return ok
	}) && s.End()
	return ids, ok && ids != nil
}

// tokenID reads with s a "token_id:<id>" string as parseTokenID reads it (plain
// decimal digits only here; other forms are left to it).
func tokenID(s *jsonscan.Scanner) (int, bool) {
	raw, ok := s.RawStr()
	const prefix = "token_id:"
	if !ok || len(raw) <= len(prefix) || len(raw) > len(prefix)+18 || string(raw[:len(prefix)]) != prefix {
		return 0, false
	}
	v := 0
	for _, c := range raw[len(prefix):] {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

// tokenIDs appends, reading with s, an array of "token_id:<id>" strings, each read as
// tokenID reads with s it, to dst.
func tokenIDs(s *jsonscan.Scanner, dst []int) ([]int, bool) {
	more, ok := s.Open()
	for ok && more {
		var v int
		if v, ok = tokenID(s); !ok {
			break
		}
		dst = append(dst, v)
		more, ok = s.Next()
	}
	return dst, ok
}
