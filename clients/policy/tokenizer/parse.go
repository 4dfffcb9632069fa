package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// fileJSON is the part of tokenizer.json that is read.
type fileJSON struct {
	AddedTokens  []addedJSON     `json:"added_tokens"`
	Normalizer   json.RawMessage `json:"normalizer"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Decoder      json.RawMessage `json:"decoder"`
	Model        json.RawMessage `json:"model"`
}

type addedJSON struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	UnkToken                *string         `json:"unk_token"`
	Vocab                   map[string]int  `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
}

// parseMerges reads the merge rules, written ["a", "b"] (current files) or
// "a b" (older ones).
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err == nil {
		return pairs, nil
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err != nil {
		return nil, errors.New("merges are neither all [a, b] pairs nor all \"a b\" strings")
	}
	pairs = make([][2]string, len(strs))
	for i, s := range strs {
		a, b, ok := strings.Cut(s, " ")
		if !ok || strings.Contains(b, " ") {
			return nil, fmt.Errorf("merge %d %q is not two tokens separated by one space", i, s)
		}
		pairs[i] = [2]string{a, b}
	}
	return pairs, nil
}

// typed is the "type" field every component has.
type typed struct {
	Type string `json:"type"`
}

func isNull(raw json.RawMessage) bool {
	return len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null"
}

// parse builds the immutable part of a tokenizer from tokenizer.json.
func parse(data []byte) (*model, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	m := &model{}
	var err error
	if m.nfc, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if m.split, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := parseDecoder(f.Decoder); err != nil {
		return nil, err
	}
	if isNull(f.Model) {
		return nil, errors.New("tokenizer.json has no model")
	}
	var mj modelJSON
	if err := json.Unmarshal(f.Model, &mj); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if err := m.buildModel(&mj); err != nil {
		return nil, err
	}
	if err := m.buildAdded(f.AddedTokens); err != nil {
		return nil, err
	}
	return m, nil
}

func parseNormalizer(raw json.RawMessage) (nfc bool, err error) {
	if isNull(raw) {
		return false, nil
	}
	var t typed
	if err := json.Unmarshal(raw, &t); err != nil {
		return false, fmt.Errorf("normalizer: %w", err)
	}
	switch t.Type {
	case "NFC":
		return true, nil
	case "Sequence":
		var seq struct {
			Normalizers []typed `json:"normalizers"`
		}
		if err := json.Unmarshal(raw, &seq); err != nil {
			return false, fmt.Errorf("normalizer: %w", err)
		}
		if len(seq.Normalizers) == 0 {
			return false, nil
		}
		if len(seq.Normalizers) == 1 && seq.Normalizers[0].Type == "NFC" {
			return true, nil
		}
		var kinds []string
		for _, n := range seq.Normalizers {
			kinds = append(kinds, n.Type)
		}
		return false, fmt.Errorf("normalizer Sequence [%s] is not supported (only NFC or none)", strings.Join(kinds, ", "))
	}
	return false, fmt.Errorf("normalizer %s is not supported (only NFC or none)", t.Type)
}

func parsePreTokenizer(raw json.RawMessage) (splitter, error) {
	if isNull(raw) {
		return splitter{}, errors.New("pre_tokenizer none is not supported (want ByteLevel, or a Sequence of Split and ByteLevel)")
	}
	var t typed
	if err := json.Unmarshal(raw, &t); err != nil {
		return splitter{}, fmt.Errorf("pre_tokenizer: %w", err)
	}
	if t.Type == "ByteLevel" {
		// ByteLevel alone splits with GPT-2's regex when use_regex is true.
		prefix, useRegex, err := byteLevelOptions(raw)
		if err != nil {
			return splitter{}, err
		}
		if prefix || !useRegex {
			return splitter{}, fmt.Errorf("pre_tokenizer ByteLevel with add_prefix_space %v, use_regex %v is not supported (want false, true; or a Sequence of Split and ByteLevel)", prefix, useRegex)
		}
		return splitter{gpt2: true}, nil
	}
	if t.Type != "Sequence" {
		return splitter{}, fmt.Errorf("pre_tokenizer %s is not supported (want ByteLevel, or a Sequence of Split and ByteLevel)", t.Type)
	}
	var seq struct {
		Pretokenizers []json.RawMessage `json:"pretokenizers"`
	}
	if err := json.Unmarshal(raw, &seq); err != nil {
		return splitter{}, fmt.Errorf("pre_tokenizer: %w", err)
	}
	var kinds []string
	for _, p := range seq.Pretokenizers {
		var pt typed
		_ = json.Unmarshal(p, &pt)
		kinds = append(kinds, pt.Type)
	}
	if len(kinds) != 2 || kinds[0] != "Split" || kinds[1] != "ByteLevel" {
		return splitter{}, fmt.Errorf("pre_tokenizer Sequence [%s] is not supported (want [Split, ByteLevel])", strings.Join(kinds, ", "))
	}
	var split struct {
		Pattern struct {
			Regex  *string `json:"Regex"`
			String *string `json:"String"`
		} `json:"pattern"`
		Behavior string `json:"behavior"`
		Invert   bool   `json:"invert"`
	}
	if err := json.Unmarshal(seq.Pretokenizers[0], &split); err != nil {
		return splitter{}, fmt.Errorf("pre_tokenizer Split: %w", err)
	}
	if split.Behavior != "Isolated" || split.Invert {
		return splitter{}, fmt.Errorf("pre_tokenizer Split with behavior %s, invert %v is not supported (want Isolated, invert false)", split.Behavior, split.Invert)
	}
	var sp splitter
	switch {
	case split.Pattern.Regex == nil:
		return splitter{}, errors.New("pre_tokenizer Split with a String pattern is not supported (want Qwen2's or Llama 3's Regex)")
	case *split.Pattern.Regex == qwen2Pattern:
		sp.maxDigits = 1
	case *split.Pattern.Regex == llama3Pattern:
		sp.maxDigits = 3
	default:
		return splitter{}, fmt.Errorf("pre_tokenizer Split regex %q is not supported (only Qwen2's and Llama 3's patterns)", *split.Pattern.Regex)
	}
	prefix, useRegex, err := byteLevelOptions(seq.Pretokenizers[1])
	if err != nil {
		return splitter{}, err
	}
	if prefix || useRegex {
		return splitter{}, fmt.Errorf("pre_tokenizer ByteLevel with add_prefix_space %v, use_regex %v is not supported (want false, false)", prefix, useRegex)
	}
	return sp, nil
}

// byteLevelOptions reads a ByteLevel pre-tokenizer's add_prefix_space and
// use_regex (which defaults to true in Hugging Face tokenizers).
func byteLevelOptions(raw json.RawMessage) (addPrefixSpace, useRegex bool, err error) {
	var bl struct {
		AddPrefixSpace bool  `json:"add_prefix_space"`
		UseRegex       *bool `json:"use_regex"`
	}
	if err := json.Unmarshal(raw, &bl); err != nil {
		return false, false, fmt.Errorf("pre_tokenizer ByteLevel: %w", err)
	}
	return bl.AddPrefixSpace, bl.UseRegex == nil || *bl.UseRegex, nil
}

func parseDecoder(raw json.RawMessage) error {
	if isNull(raw) {
		return errors.New("decoder none is not supported (want ByteLevel)")
	}
	var t typed
	if err := json.Unmarshal(raw, &t); err != nil {
		return fmt.Errorf("decoder: %w", err)
	}
	if t.Type != "ByteLevel" {
		return fmt.Errorf("decoder %s is not supported (want ByteLevel)", t.Type)
	}
	return nil
}

func (m *model) buildModel(mj *modelJSON) error {
	switch {
	case mj.Type != "BPE":
		return fmt.Errorf("model %s is not supported (want BPE)", mj.Type)
	case mj.Dropout != nil && *mj.Dropout != 0:
		return fmt.Errorf("BPE dropout %v is not supported", *mj.Dropout)
	case mj.ByteFallback:
		return errors.New("BPE byte_fallback is not supported")
	case mj.ContinuingSubwordPrefix != nil && *mj.ContinuingSubwordPrefix != "":
		return fmt.Errorf("BPE continuing_subword_prefix %q is not supported", *mj.ContinuingSubwordPrefix)
	case mj.EndOfWordSuffix != nil && *mj.EndOfWordSuffix != "":
		return fmt.Errorf("BPE end_of_word_suffix %q is not supported", *mj.EndOfWordSuffix)
	case len(mj.Vocab) == 0:
		return errors.New("BPE model has an empty vocab")
	}
	m.ignoreMerges = mj.IgnoreMerges
	bl := newByteLevel()
	// The vocabulary, by id, in bytes.
	maxID := -1
	for _, id := range mj.Vocab {
		if id < 0 {
			return fmt.Errorf("vocab has a negative id %d", id)
		}
		maxID = max(maxID, id)
	}
	if maxID >= 1<<31-1 {
		return fmt.Errorf("vocab id %d is too large", maxID)
	}
	m.pieces = make([][]byte, maxID+1)
	m.bytesToID = make(map[string]int32, len(mj.Vocab))
	for tok, id := range mj.Vocab {
		b, err := bl.decode(tok)
		if err != nil {
			return fmt.Errorf("vocab entry %d: %w", id, err)
		}
		if m.pieces[id] != nil {
			return fmt.Errorf("vocab id %d is given twice", id)
		}
		m.pieces[id] = b
		m.bytesToID[string(b)] = int32(id)
	}
	// A byte without a token of its own is dropped from the text, as
	// Hugging Face's BPE drops a character it has no id for when the model
	// has no unk_token (SmolLM2's vocabulary lacks six control bytes and the
	// eleven bytes no UTF-8 text holds).
	for c := 0; c < 256; c++ {
		id, ok := m.bytesToID[string([]byte{byte(c)})]
		if !ok {
			id = -1
			m.unknownBytes = true
		}
		m.byteID[c] = id
	}
	if m.unknownBytes && mj.UnkToken != nil {
		return fmt.Errorf("BPE unk_token %q with bytes the vocab has no token for is not supported (want no unk_token: the bytes are dropped)", *mj.UnkToken)
	}
	merges, err := parseMerges(mj.Merges)
	if err != nil {
		return err
	}
	m.merges = make(map[uint64]merge, len(merges))
	for rank, mg := range merges {
		a, okA := mj.Vocab[mg[0]]
		b, okB := mj.Vocab[mg[1]]
		ab, okAB := mj.Vocab[mg[0]+mg[1]]
		if !okA || !okB || !okAB {
			return fmt.Errorf("merge %d (%q %q) names a token not in the vocab", rank, mg[0], mg[1])
		}
		k := pairKey(int32(a), int32(b))
		if _, dup := m.merges[k]; !dup { // the first (lowest) rank of a repeated rule counts
			m.merges[k] = merge{rank: int32(rank), id: int32(ab)}
		}
	}
	return nil
}

func (m *model) buildAdded(added []addedJSON) error {
	m.addedByContent = make(map[string]int32, len(added))
	for _, a := range added {
		switch {
		case a.Content == "":
			return fmt.Errorf("added token %d has no content", a.ID)
		case a.SingleWord || a.LStrip || a.RStrip:
			return fmt.Errorf("added token %q: single_word, lstrip and rstrip are not supported", a.Content)
		case a.Normalized:
			return fmt.Errorf("added token %q: normalized true is not supported", a.Content)
		case a.ID < 0 || a.ID >= 1<<31-1:
			return fmt.Errorf("added token %q has id %d", a.Content, a.ID)
		}
		if prev, dup := m.addedByContent[a.Content]; dup {
			if int(prev) != a.ID {
				return fmt.Errorf("added token %q is given ids %d and %d", a.Content, prev, a.ID)
			}
			continue
		}
		m.addedByContent[a.Content] = int32(a.ID)
		for a.ID >= len(m.pieces) {
			m.pieces = append(m.pieces, nil)
		}
		m.pieces[a.ID] = []byte(a.Content)
		if a.Special {
			if m.special == nil {
				m.special = make(map[int32]bool)
			}
			m.special[int32(a.ID)] = true
		}
		m.addedFirst[a.Content[0]] = append(m.addedFirst[a.Content[0]], a.Content)
	}
	// Longest first, so the first that matches at a position is the longest.
	for i := range m.addedFirst {
		sort.SliceStable(m.addedFirst[i], func(x, y int) bool { return len(m.addedFirst[i][x]) > len(m.addedFirst[i][y]) })
	}
	return nil
}
