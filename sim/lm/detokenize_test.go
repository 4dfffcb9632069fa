package lm

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestSimDetokenizerHoldsBackPartialCharacters checks the text grows as
// vLLM's incremental detokenizer's: a token holding part of a character
// adds nothing until the character completes; a character left incomplete
// at the end never shows.
func TestSimDetokenizerHoldsBackPartialCharacters(t *testing.T) {
	tk := getFixture(t).tk
	ids := tk.Encode("a龘") // a, e9 be, 98
	if len(ids) != 3 {
		t.Fatalf("a龘 is %d tokens", len(ids))
	}
	var ts textStream
	for i, want := range []struct {
		added int
		text  string
	}{{1, "a"}, {0, "a"}, {3, "a龘"}} {
		if n := ts.add(tk, ids[i], false); n != want.added || string(ts.text) != want.text {
			t.Errorf("token %d: added %d, text %q; want %d, %q", i, n, ts.text, want.added, want.text)
		}
	}
	var cut textStream
	cut.add(tk, ids[0], false)
	cut.add(tk, ids[1], false)
	if string(cut.text) != "a" {
		t.Errorf("an incomplete character shows: %q", cut.text)
	}
	imStart, _ := tk.ID(TokIMStart)
	var sp textStream
	if sp.add(tk, imStart, false) != 0 || sp.add(tk, imStart, true) != len(TokIMStart) || string(sp.text) != TokIMStart {
		t.Errorf("special tokens: %q", sp.text)
	}
	// An invalid byte shows as U+FFFD once something follows it.
	var bad textStream
	ff, _ := tk.ID("\xff")
	if bad.add(tk, ff, false) != 0 || bad.add(tk, ids[0], false) != len("\uFFFDa") || string(bad.text) != "\uFFFDa" {
		t.Errorf("invalid byte: %q", bad.text)
	}
}

// TestSimStopStringsCheckedLikeVLLM checks check_stop_strings' rules: only
// a match that ends in the text just added counts; the first stop string of
// the list wins, not the earliest match; the text is cut at the match's
// start, or its end with include_stop_str_in_output.
func TestSimStopStringsCheckedLikeVLLM(t *testing.T) {
	stops := []string{"</search>", "</answer>"}
	for _, tc := range []struct {
		text    string
		added   int
		include bool
		stop    string
		cut     int
	}{
		{"x</answer></search>", 19, true, "</search>", -1},
		{"x</answer></search>", 19, false, "</search>", 10},
		{"x</search>\n\n", 3, true, "</search>", 10},
		{"x</search>\n\n", 3, false, "</search>", 1},
		{"x</search>\n\n", 2, true, "", -1}, // the match ended before the new text
		{"x</search", 5, true, "", -1},
		{"x</search>", 0, true, "", -1},
	} {
		stop, cut := matchStop([]byte(tc.text), tc.added, stops, tc.include)
		if stop != tc.stop || cut != tc.cut {
			t.Errorf("%q (+%d, include %v): %q %d, want %q %d", tc.text, tc.added, tc.include, stop, cut, tc.stop, tc.cut)
		}
	}
	// Through Generate: a search turn's text stops at </search>.
	f := getFixture(t)
	prompt := f.tk.Encode(promptText(f.hotpot[2].Q, ""))
	params := InitialParams()
	params[PSearchBias] = 5
	g := f.model.Generate(params, prompt, Sampling{Temperature: 1, MaxTokens: 200, Stop: stops, IncludeStopStr: true}, rand.New(rand.NewPCG(1, 2)))
	if g.StopReason != "</search>" || !strings.HasSuffix(g.Text, "</search>") || strings.Count(g.Text, "</search>") != 1 {
		t.Errorf("Generate: %q, stop %q", g.Text, g.StopReason)
	}
}
