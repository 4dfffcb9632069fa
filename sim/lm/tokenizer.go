package lm

import (
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/hindsearch/hindsearch/clients/policy/tokenizer"
)

// Added tokens of Qwen2.5's tokenizer that the simulator names.
const (
	TokEndOfText = "<|endoftext|>"
	TokIMStart   = "<|im_start|>"
	TokIMEnd     = "<|im_end|>"
)

// Tokenizer is the simulator's tokenizer: Qwen2.5's byte-level BPE
// (clients/policy/tokenizer.Qwen25), so that every id the simulated servers
// take or return is a Qwen2.5 id with Qwen's token boundaries. It adds each
// id's bytes as a string (Piece) and a bounded cache of the encodings the
// policy makes again and again (its candidate turns). It is safe for
// concurrent use.
type Tokenizer struct {
	qw *tokenizer.Tokenizer
	// pieces holds every id's exact bytes as a string.
	pieces []string
	// special[id] is true for the added tokens marked special.
	special []bool
	cache   encodeCache
}

// NewTokenizer returns Qwen2.5's tokenizer (embedded in the binary).
func NewTokenizer() (*Tokenizer, error) {
	qw, err := tokenizer.Qwen25()
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	tk := &Tokenizer{qw: qw, pieces: make([]string, qw.VocabSize()), special: make([]bool, qw.VocabSize())}
	for id := range tk.pieces {
		b, _ := qw.TokenBytes(id)
		tk.pieces[id] = string(b)
		tk.special[id] = qw.IsSpecial(id)
	}
	tk.cache.init(encodeCacheTexts)
	return tk, nil
}

// VocabSize is the number of token ids (Qwen2.5's 151,643 BPE tokens and 22
// added tokens: 151,665).
func (tk *Tokenizer) VocabSize() int { return len(tk.pieces) }

// ID returns the id of an added token given by its content ("<|im_end|>")
// or of the vocabulary entry whose exact bytes are piece.
func (tk *Tokenizer) ID(piece string) (int, bool) { return tk.qw.TokenID(piece) }

// Encode tokenizes text as Hugging Face's encode(text,
// add_special_tokens=False) does with Qwen2.5's tokenizer: added tokens
// (<|im_start|>, <|im_end|>, ...) matched whole, the rest by byte-level BPE.
func (tk *Tokenizer) Encode(text string) []int { return tk.qw.Encode(text) }

// AppendEncode appends the ids of text (as Encode) to dst.
func (tk *Tokenizer) AppendEncode(dst []int, text string) []int { return tk.qw.AppendEncode(dst, text) }

// encodeShared returns the ids of text from the tokenizer's bounded cache
// (encoding it on a miss). The slice is shared: never modify it.
func (tk *Tokenizer) encodeShared(text string) []int {
	if ids, ok := tk.cache.get(text); ok {
		return ids
	}
	ids := tk.qw.Encode(text)
	tk.cache.put(text, ids)
	return ids
}

// TokenBytes returns the exact bytes of one id (possibly part of a UTF-8
// character); ok is false for an id outside the vocabulary. The slice is
// shared: do not modify it.
func (tk *Tokenizer) TokenBytes(id int) ([]byte, bool) { return tk.qw.TokenBytes(id) }

// Decode returns the exact bytes of ids as a string (not necessarily valid
// UTF-8); an out-of-range id adds nothing and makes ok false.
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

// DecodeText is Hugging Face's decode(ids) as a Python string: the bytes of
// ids (special tokens' content dropped when skipSpecial) with every
// ill-formed UTF-8 sequence replaced by U+FFFD (lossyUTF8). ok is false when
// an id is out of range (it adds nothing).
func (tk *Tokenizer) DecodeText(ids []int, skipSpecial bool) (string, bool) {
	var b []byte
	ok := true
	for _, id := range ids {
		if id < 0 || id >= len(tk.pieces) {
			ok = false
			continue
		}
		if skipSpecial && tk.special[id] {
			continue
		}
		b = append(b, tk.pieces[id]...)
	}
	return lossyUTF8(b), ok
}

// Piece returns the exact bytes of one token id as a string ("" when out of
// range).
func (tk *Tokenizer) Piece(id int) string {
	if id < 0 || id >= len(tk.pieces) {
		return ""
	}
	return tk.pieces[id]
}

// IsSpecial reports whether id is an added token marked special
// (<|endoftext|>, <|im_start|>, <|im_end|>, ...).
func (tk *Tokenizer) IsSpecial(id int) bool { return id >= 0 && id < len(tk.special) && tk.special[id] }

// encodeCacheTexts bounds the encoding cache: each of its two generations
// holds at most this many texts.
const encodeCacheTexts = 1 << 15

// encodeCache maps texts to their ids, bounded: when the current
// generation is full it becomes the old one (the one before is dropped), and
// a hit in the old generation moves the text back to the current one.
type encodeCache struct {
	mu       sync.Mutex
	max      int
	cur, old map[string][]int
}

func (c *encodeCache) init(max int) {
	c.max = max
	c.cur = make(map[string][]int)
}

func (c *encodeCache) get(text string) ([]int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ids, ok := c.cur[text]; ok {
		return ids, true
	}
	ids, ok := c.old[text]
	if ok {
		c.putLocked(text, ids)
	}
	return ids, ok
}

func (c *encodeCache) put(text string, ids []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(text, ids)
}

func (c *encodeCache) putLocked(text string, ids []int) {
	if len(c.cur) >= c.max {
		c.old, c.cur = c.cur, make(map[string][]int, len(c.cur))
	}
	c.cur[text] = ids
}

// lossyUTF8 is Python's bytes.decode("utf-8", "replace") (and Rust's
// String::from_utf8_lossy, which Hugging Face tokenizers' decode uses):
// every maximal prefix of a well-formed sequence that does not complete, and
// every byte that cannot start one, becomes one U+FFFD.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			out = append(out, b[i])
			i++
			continue
		}
		if r, n := utf8.DecodeRune(b[i:]); r != utf8.RuneError || n > 1 {
			out = append(out, b[i:i+n]...)
			i += n
			continue
		}
		i += maximalSubpart(b[i:])
		out = append(out, "\uFFFD"...)
	}
	return string(out)
}

// maximalSubpart returns the length of the ill-formed sequence at the start
// of b (b does not start with a well-formed character): the lead byte and
// the continuation bytes that follow it while they could still complete a
// character (Unicode's "maximal subpart"; at least 1).
func maximalSubpart(b []byte) int {
	lo, hi, need := byte(0x80), byte(0xBF), 0
	switch c := b[0]; {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		lo, need = 0xA0, 2
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		hi, need = 0x9F, 2
	case c == 0xF0:
		lo, need = 0x90, 3
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		hi, need = 0x8F, 3
	default:
		return 1
	}
	n := 1
	for ; n <= need && n < len(b); n++ {
		if b[n] < lo || b[n] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
	}
	return n
}

// The simulator's tokenizer also serves as a process's local tokenizer
// (the orchestrator's policy.tokenizer for embedded policies): Tokenizer
// has TokenBytes and AppendEncode, and ChatTemplate is the template the
// simulated policy's /tokenize applies.

// ChatMessage is one message of a chat, as ChatTemplate renders it and the
// simulated servers' chat and tokenize requests carry it (JSON "role" and
// "content").
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// SystemPrompt is Qwen2.5's default system line: its chat template
// inserts it when the first message is not a system message.
const SystemPrompt = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

// ChatTemplate renders messages with Qwen2.5's chat template (the one of
// its tokenizer_config.json, without tools): a system message first, or
// SystemPrompt's when there is none; then each user message, later system
// message and assistant message as "<|im_start|>ROLE\nCONTENT<|im_end|>\n";
// a run of tool messages as one user turn of
// "\n<tool_response>\nCONTENT\n</tool_response>" parts; messages of any
// other role are left out, as the template leaves them; then, with
// addGenerationPrompt, the assistant header "<|im_start|>assistant\n".
func ChatTemplate(msgs []ChatMessage, addGenerationPrompt bool) string {
	var b strings.Builder
	if len(msgs) > 0 && msgs[0].Role == "system" {
		b.WriteString(TokIMStart + "system\n" + msgs[0].Content + TokIMEnd + "\n")
	} else {
		b.WriteString(TokIMStart + "system\n" + SystemPrompt + TokIMEnd + "\n")
	}
	for i, m := range msgs {
		switch {
		case m.Role == "user" || m.Role == "assistant" || m.Role == "system" && i > 0:
			b.WriteString(TokIMStart + m.Role + "\n" + m.Content + TokIMEnd + "\n")
		case m.Role == "tool":
			if i == 0 || msgs[i-1].Role != "tool" {
				b.WriteString(TokIMStart + "user")
			}
			b.WriteString("\n<tool_response>\n" + m.Content + "\n</tool_response>")
			if i == len(msgs)-1 || msgs[i+1].Role != "tool" {
				b.WriteString(TokIMEnd + "\n")
			}
		}
	}
	if addGenerationPrompt {
		b.WriteString(assistantHeader)
	}
	return b.String()
}
