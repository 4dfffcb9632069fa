package lm

import (
	"bytes"
	"slices"
	"testing"
)

// The simulated tokenizer serves as a local tokenizer: each id's exact
// bytes concatenate to the text it encodes (a character split over tokens
// leaves part of its bytes in each), AppendEncode appends what Encode
// returns, and ids outside the vocabulary have no bytes.
func TestSimTokenizerTokenBytesAreTheExactBytesOfEachID(t *testing.T) {
	tk, err := NewTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"<search> café 東京 🎉 </search>\n\n", "<|im_start|>user\nQ?<|im_end|>\n", " \n\t  x", "Zoë Saldaña"} {
		ids := tk.Encode(s)
		var got []byte
		for _, id := range ids {
			b, ok := tk.TokenBytes(id)
			if !ok {
				t.Fatalf("TokenBytes(%d): not in the vocabulary", id)
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
	for _, id := range []int{-1, tk.VocabSize()} {
		if b, ok := tk.TokenBytes(id); ok || b != nil {
			t.Errorf("TokenBytes(%d) = %q, %v", id, b, ok)
		}
	}
	// ChatMessage builds the simulated chat template's messages.
	want := TokIMStart + "system\n" + SystemPrompt + TokIMEnd + "\n" + TokIMStart + "user\nQ?" + TokIMEnd + "\n" + TokIMStart + "assistant\n"
	if got := ChatTemplate([]ChatMessage{{Role: "user", Content: "Q?"}}, true); got != want {
		t.Errorf("ChatTemplate = %q, want %q", got, want)
	}
}
