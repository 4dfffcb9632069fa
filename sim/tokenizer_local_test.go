package sim

import (
	"bytes"
	"slices"
	"testing"
)

// The simulated tokenizer serves as a local tokenizer: each id's exact
// bytes concatenate to the text it encodes (a multi-byte character outside
// the vocabulary is split over byte tokens, each holding part of it), and
// AppendEncode appends what Encode returns.
func TestSimTokenizerTokenBytesAreTheExactBytesOfEachID(t *testing.T) {
	tk := smallTokenizer()
	for _, s := range append(slices.Clone(roundTripSeeds), "<search> café 東京 🎉 </search>\n\n") {
		ids := tk.Encode(s)
		var got []byte
		for _, id := range ids {
			b, ok := tk.TokenBytes(id)
			if !ok || string(b) != tk.Piece(id) {
				t.Fatalf("TokenBytes(%d) = %q, %v; piece %q", id, b, ok, tk.Piece(id))
			}
			got = append(got, b...)
		}
		if !bytes.Equal(got, []byte(s)) {
			t.Errorf("bytes of Encode(%q) = %q", s, got)
		}
		prefix := []int{7, 8}
		if app := tk.AppendEncode(slices.Clone(prefix), s); !slices.Equal(app, append(prefix, ids...)) {
			t.Errorf("AppendEncode(%q) = %v, want %v then %v", s, app, prefix, ids)
		}
	}
	// A byte token of a character split over several: one byte of it.
	ids := tk.Encode("🎉")
	if b, _ := tk.TokenBytes(ids[0]); len(ids) != 4 || len(b) != 1 || b[0] != 0xf0 {
		t.Errorf("🎉 = %v, first token %q", ids, b)
	}
	for _, id := range []int{-1, tk.VocabSize()} {
		if b, ok := tk.TokenBytes(id); ok || b != nil {
			t.Errorf("TokenBytes(%d) = %q, %v", id, b, ok)
		}
	}
	// ChatMessage builds the simulated chat template's messages.
	if got := ChatTemplate([]ChatMessage{{Role: "user", Content: "Q?"}}, true); got != ChatTemplate([]chatMessage{{Role: "user", Content: "Q?"}}, true) {
		t.Errorf("ChatTemplate = %q", got)
	}
}
