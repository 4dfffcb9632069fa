package tokenizer

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"golang.org/x/text/unicode/norm"
)

// model is the immutable part of a tokenizer, shareable between Tokenizers.
type model struct {
	// pieces holds each id's exact bytes (nil: no such id); added tokens
	// hold their content.
	pieces [][]byte
	// bytesToID maps a vocabulary entry's bytes to its id.
	bytesToID map[string]int32
	// byteID is the id of each single byte; -1 for a byte the vocabulary
	// has no token for (unknownBytes is then true).
	byteID       [256]int32
	unknownBytes bool
	merges       map[uint64]merge
	// ignoreMerges: a piece that is a vocabulary entry encodes as it.
	ignoreMerges bool

	addedByContent map[string]int32
	// addedFirst lists the added tokens by their first byte, longest first.
	addedFirst [256][]string
	special    map[int32]bool

	nfc   bool
	split splitter
}

// Tokenizer is a Hugging Face byte-level BPE tokenizer (tokenizer.json).
// It is safe for concurrent use.
type Tokenizer struct {
	m       *model
	cache   *pieceCache
	scratch sync.Pool // *bpeScratch
}

func newTokenizer(m *model) *Tokenizer {
	t := &Tokenizer{m: m, cache: newPieceCache()}
	t.scratch.New = func() any { return new(bpeScratch) }
	return t
}

// Load reads a tokenizer.json file, plain or gzip-compressed (told by its
// content, not its name).
func Load(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	return t, nil
}

// Parse builds a tokenizer from the content of a tokenizer.json (plain or
// gzip-compressed). Its error names what is not supported (model type,
// normaliser, pre-tokenizer, decoder, added-token flags).
func Parse(data []byte) (*Tokenizer, error) {
	data, err := gunzipIf(data)
	if err != nil {
		return nil, err
	}
	m, err := parse(data)
	if err != nil {
		return nil, err
	}
	return newTokenizer(m), nil
}

func gunzipIf(data []byte) ([]byte, error) {
	if len(data) < 2 || data[0] != 0x1f || data[1] != 0x8b {
		return data, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("gunzip: %w", err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("gunzip: %w", err)
	}
	return out, nil
}

//go:embed qwen2.5/tokenizer.json.gz
var qwen25JSON []byte

// qwen25 parses the embedded Qwen2.5 tokenizer once per process, on first
// use. What it holds is immutable; each Qwen25 call wraps it in a
// Tokenizer of its own (its own piece cache).
var qwen25 = sync.OnceValues(func() (*model, error) {
	data, err := gunzipIf(qwen25JSON)
	if err != nil {
		return nil, err
	}
	return parse(data)
})

// Qwen25 returns Qwen2.5's tokenizer (qwen2.5/tokenizer.json.gz, embedded
// in the binary; see qwen2.5/SOURCES.md). The file is parsed once per
// process, lazily (a sync.OnceValues holding the immutable tables); every
// call returns a new Tokenizer with its own piece cache.
func Qwen25() (*Tokenizer, error) {
	m, err := qwen25()
	if err != nil {
		return nil, fmt.Errorf("tokenizer qwen2.5: %w", err)
	}
	return newTokenizer(m), nil
}

// qwen3Added are the added tokens Qwen3's tokenizer.json has beyond
// Qwen2.5's (ids 151665-151668, all non-special, not normalised): its
// vocabulary, merges, normaliser, pre-tokenizer and decoder are Qwen2.5's
// (qwen2.5/SOURCES.md compares the two files).
var qwen3Added = []addedJSON{
	{ID: 151665, Content: "<tool_response>"},
	{ID: 151666, Content: "</tool_response>"},
	{ID: 151667, Content: "<think>"},
	{ID: 151668, Content: "</think>"},
}

var qwen3 = sync.OnceValues(func() (*model, error) {
	data, err := gunzipIf(qwen25JSON)
	if err != nil {
		return nil, err
	}
	var f map[string]json.RawMessage
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	var added []addedJSON
	if err := json.Unmarshal(f["added_tokens"], &added); err != nil {
		return nil, err
	}
	if f["added_tokens"], err = json.Marshal(append(added, qwen3Added...)); err != nil {
		return nil, err
	}
	if data, err = json.Marshal(f); err != nil {
		return nil, err
	}
	return parse(data)
})

// Qwen3 returns the Qwen3 family's tokenizer (Qwen/Qwen3-*): Qwen2.5's
// with the four added tokens Qwen3 adds (<tool_response>,
// </tool_response>, <think>, </think>, which it then encodes as one id
// each). It equals Qwen3's tokenizer.json (sha256 aeb13307…dae4) on the
// reference texts of testdata/qwen3_reference.jsonl.
func Qwen3() (*Tokenizer, error) {
	m, err := qwen3()
	if err != nil {
		return nil, fmt.Errorf("tokenizer qwen3: %w", err)
	}
	return newTokenizer(m), nil
}

// Encode returns the ids of text, as Hugging Face tokenizers'
// encode(text, add_special_tokens=False) does: added tokens matched whole
// first, then NFC, the Split pre-tokenizer, ByteLevel and BPE.
func (t *Tokenizer) Encode(text string) []int {
	return t.AppendEncode(nil, text)
}

// AppendEncode appends the ids of text (as Encode) to dst and returns the
// extended slice.
func (t *Tokenizer) AppendEncode(dst []int, text string) []int {
	m := t.m
	start := 0 // start of the text not yet encoded
	for i := 0; i < len(text); i++ {
		cands := m.addedFirst[text[i]]
		if len(cands) == 0 {
			continue
		}
		for _, c := range cands {
			if strings.HasPrefix(text[i:], c) {
				dst = t.encodeText(dst, text[start:i])
				dst = append(dst, int(m.addedByContent[c]))
				start = i + len(c)
				i = start - 1
				break
			}
		}
	}
	return t.encodeText(dst, text[start:])
}

// encodeText encodes text that holds no added token.
func (t *Tokenizer) encodeText(dst []int, text string) []int {
	if len(text) == 0 {
		return dst
	}
	if t.m.nfc && norm.NFC.QuickSpanString(text) < len(text) {
		text = norm.NFC.String(text)
	}
	for len(text) > 0 {
		n := t.m.split.next(text)
		dst = t.encodePiece(dst, text[:n])
		text = text[n:]
	}
	return dst
}

// encodePiece appends the BPE ids of one pre-tokenized piece.
func (t *Tokenizer) encodePiece(dst []int, piece string) []int {
	if t.m.unknownBytes {
		piece = t.m.dropUnknown(piece)
		if piece == "" {
			return dst
		}
	}
	if len(piece) == 1 {
		return append(dst, int(t.m.byteID[piece[0]]))
	}
	if len(piece) > cacheMaxPiece {
		return t.m.bpe(dst, piece, &t.scratch)
	}
	if out, ok := t.cache.get(dst, piece); ok {
		return out
	}
	n := len(dst)
	dst = t.m.bpe(dst, piece, &t.scratch)
	t.cache.put(piece, dst[n:])
	return dst
}

// dropUnknown returns piece without the bytes the vocabulary has no token
// for: the characters Hugging Face's BPE skips before merging (so that the
// bytes on either side may merge).
func (m *model) dropUnknown(piece string) string {
	for i := 0; i < len(piece); i++ {
		if m.byteID[piece[i]] < 0 {
			b := []byte(piece[:i])
			for ; i < len(piece); i++ {
				if m.byteID[piece[i]] >= 0 {
					b = append(b, piece[i])
				}
			}
			return string(b)
		}
	}
	return piece
}

// TokenBytes returns the exact bytes of one id: a BPE token's bytes
// (ByteLevel decoded; possibly part of a UTF-8 character) or an added
// token's content. ok is false for an id the tokenizer does not have. The
// slice is shared: do not modify it.
func (t *Tokenizer) TokenBytes(id int) ([]byte, bool) {
	if id < 0 || id >= len(t.m.pieces) || t.m.pieces[id] == nil {
		return nil, false
	}
	return t.m.pieces[id], true
}

// Decode returns the concatenated exact bytes of ids; an id the tokenizer
// does not have is an error naming it and its index.
func (t *Tokenizer) Decode(ids []int) ([]byte, error) {
	return t.AppendDecode(nil, ids)
}

// AppendDecode appends the bytes of ids (as Decode) to dst.
func (t *Tokenizer) AppendDecode(dst []byte, ids []int) ([]byte, error) {
	for i, id := range ids {
		b, ok := t.TokenBytes(id)
		if !ok {
			return dst, fmt.Errorf("token %d (index %d) is not in the vocabulary of %d ids", id, i, len(t.m.pieces))
		}
		dst = append(dst, b...)
	}
	return dst, nil
}

// VocabSize is the highest id plus one (ids below it may be unassigned).
func (t *Tokenizer) VocabSize() int { return len(t.m.pieces) }

// TokenID returns the id of an added token given by its content (such as
// "<|im_end|>"), else of the vocabulary entry whose exact bytes are content
// (" the", ">\n\n"; not the byte-level spelling "Ġthe").
func (t *Tokenizer) TokenID(content string) (int, bool) {
	if id, ok := t.m.addedByContent[content]; ok {
		return int(id), true
	}
	if id, ok := t.m.bytesToID[content]; ok {
		return int(id), true
	}
	return 0, false
}

// IsSpecial reports whether id is an added token marked special (such as
// <|im_start|>; Qwen2.5's <tool_call> is added but not special).
func (t *Tokenizer) IsSpecial(id int) bool {
	return id >= 0 && id < len(t.m.pieces) && t.m.special[int32(id)]
}
