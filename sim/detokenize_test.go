package sim

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/sim/lm"
)

// searchChoice asks the policy server, with the orchestrator's rollout
// fields and include_stop_str_in_output as given, for turns of a HotpotQA
// question until one stops at </search>, and returns it.
func searchChoice(t *testing.T, f *fixture, c apiClient, include bool, extra map[string]any) (ids []int, ch struct {
	Text     string
	TokenIDs []int
	Stop     string
	Tokens   []string
	Offsets  []int
}) {
	t.Helper()
	ids = f.tk.Encode(promptText(f.hotpot[2].Q, ""))
	req := map[string]any{"prompt": ids, "max_tokens": 500, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "seed": 7, "n": 16,
		"stop": format.StopStrings, "logprobs": 0, "return_token_ids": true, "include_stop_str_in_output": include,
		"skip_special_tokens": false}
	for k, v := range extra {
		req[k] = v
	}
	out := complete(t, c, req)
	for _, c := range out.Choices {
		if c.StopReason != nil && *c.StopReason == "</search>" {
			ch.Text, ch.TokenIDs, ch.Stop, ch.Tokens, ch.Offsets = c.Text, c.TokenIDs, *c.StopReason, c.Logprobs.Tokens, c.Logprobs.TextOffset
			return ids, ch
		}
	}
	t.Fatalf("no choice of 16 stopped at </search>")
	return
}

// TestSimSearchTurnEndsInATokenPastTheStopString checks the policy stops as
// vLLM does with Qwen's tokenizer: the token that completes </search> is
// ">\n\n", so the sampled ids run past the stop string while the text ends
// at it (include_stop_str_in_output) or before it.
func TestSimSearchTurnEndsInATokenPastTheStopString(t *testing.T) {
	f := getFixture(t)
	_, c := newPolicy(t, f)
	_, full := searchChoice(t, f, c, true, nil)
	last, _ := f.tk.ID(">\n\n")
	if !strings.HasSuffix(full.Text, "</search>") || full.TokenIDs[len(full.TokenIDs)-1] != last {
		t.Fatalf("text %q, last token %q", full.Text, f.tk.Piece(full.TokenIDs[len(full.TokenIDs)-1]))
	}
	if got, _ := f.tk.Decode(full.TokenIDs); got != full.Text+"\n\n" {
		t.Errorf("the ids decode to %q, want the text and the \\n\\n past the stop string", got)
	}
	if kind, _ := format.ParseAction(full.Text); kind != format.ActionSearch {
		t.Errorf("%q is not a search", full.Text)
	}
	_, cut := searchChoice(t, f, c, false, nil)
	if cut.Text != strings.TrimSuffix(full.Text, "</search>") || !slices.Equal(cut.TokenIDs, full.TokenIDs) {
		t.Errorf("without include_stop_str_in_output: %q %v; with: %q %v", cut.Text, cut.TokenIDs, full.Text, full.TokenIDs)
	}
}

// TestSimTextOffsetCountsTokenIDPlaceholders checks text_offset follows
// vLLM's arithmetic with return_tokens_as_token_ids: it starts at 0 and
// adds the length of each "token_id:N" string, so it does not index the
// text.
func TestSimTextOffsetCountsTokenIDPlaceholders(t *testing.T) {
	f := getFixture(t)
	_, c := newPolicy(t, f)
	_, ch := searchChoice(t, f, c, true, map[string]any{"return_tokens_as_token_ids": true})
	want := 0
	for j, id := range ch.TokenIDs {
		tok := "token_id:" + strconv.Itoa(id)
		if ch.Tokens[j] != tok || ch.Offsets[j] != want {
			t.Fatalf("token %d: %q at %d, want %q at %d", j, ch.Tokens[j], ch.Offsets[j], tok, want)
		}
		want += len(tok)
	}
	if ch.Offsets[len(ch.Offsets)-1] <= len(ch.Text) {
		t.Errorf("the last offset %d is within the text (%d bytes): not placeholder arithmetic", ch.Offsets[len(ch.Offsets)-1], len(ch.Text))
	}
}

// TestSimStopTokenTextOnlyWithIncludeStopStr checks the end-of-turn token:
// vLLM leaves it out of the text unless include_stop_str_in_output, and
// then writes its content only when skip_special_tokens is false.
func TestSimStopTokenTextOnlyWithIncludeStopStr(t *testing.T) {
	f := getFixture(t)
	_, c := newPolicy(t, f)
	eos, _ := f.tk.ID(lm.TokIMEnd)
	// Before any assistant header the model ends the text at once.
	for _, tc := range []struct {
		include bool
		skip    any
		want    string
	}{
		{false, false, ""}, {true, false, lm.TokIMEnd}, {true, true, ""}, {true, nil, ""},
	} {
		req := map[string]any{"prompt": "hello", "max_tokens": 5, "temperature": 0, "include_stop_str_in_output": tc.include,
			"return_token_ids": true, "skip_special_tokens": tc.skip}
		if tc.skip == nil {
			delete(req, "skip_special_tokens")
		}
		ch := complete(t, c, req).Choices[0]
		if ch.Text != tc.want || !slices.Equal(ch.TokenIDs, []int{eos}) || ch.FinishReason != "stop" || ch.StopReason != nil {
			t.Errorf("include %v skip %v: %q %v %q %v, want %q", tc.include, tc.skip, ch.Text, ch.TokenIDs, ch.FinishReason, ch.StopReason, tc.want)
		}
	}
}
