package results

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// What a turn after a cut block did, from its text and token count.
func TestAfterCutKind(t *testing.T) {
	for _, tc := range []struct {
		text   string
		tokens int
		want   string
	}{
		{"</information>\n\n<think> x </think>\n<search> q </search>", 12, AfterCutClosed},
		{" \n</information>\n\n<answer> a </answer>", 9, AfterCutClosed},
		{"1990s.\nDoc 3(Title: \"B\") more</information>\n\n<answer> a </answer>", 20, AfterCutWroteOn},
		{"<|im_end|>", 1, AfterCutStopped},
		{"", 0, AfterCutStopped},
		{"\n\n", 2, AfterCutStopped},
		{"<think> I need more information. </think>\n<search> q </search>", 14, AfterCutOther},
		{"and so on, the passage goes on", 8, AfterCutOther},
	} {
		if got := AfterCutKind(tc.text, tc.tokens); got != tc.want {
			t.Errorf("AfterCutKind(%q, %d) = %s, want %s", tc.text, tc.tokens, got, tc.want)
		}
	}
}

// The shares sum to 1 over the turns; none gives nil, and the health line
// and table say "-" or the shares.
func TestNewAfterCut(t *testing.T) {
	if NewAfterCut(nil) != nil {
		t.Error("no turns gave shares")
	}
	a := NewAfterCut([]string{AfterCutClosed, AfterCutClosed, AfterCutWroteOn, AfterCutStopped, AfterCutOther, AfterCutClosed, AfterCutClosed, AfterCutClosed})
	if a.Turns != 8 || a.Shares() != [4]float64{0.625, 0.125, 0.125, 0.125} {
		t.Errorf("%+v", a)
	}
	if line := HealthLine(&Health{AfterCut: a}); !strings.Contains(line, "after a cut (8 turns) closed/wrote on/stopped/other 62/12/12/12%") {
		t.Errorf("health line: %s", line)
	}
	if line := HealthLine(&Health{}); strings.Contains(line, "after a cut") {
		t.Errorf("a step without cut blocks: %s", line)
	}
	var none *AfterCut
	if none.cells() != "-" {
		t.Errorf("nil cells %q", none.cells())
	}
}

// gold_retrieved_rate is a health metric like the others where it was
// recorded, and absent (not 0) in a record from before it existed: Value
// says so, the health line leaves it out.
func TestGoldRetrievedRateValue(t *testing.T) {
	rate := 0.375
	for _, c := range []struct {
		name   string
		record string
		want   *float64
		line   string
	}{
		{"recorded", `{"answer_rate":0.5,"gold_retrieved_rate":0.375}`, &rate, "retrieval errors 0.0%  gold retrieved 38%  truncated"},
		{"recorded as 0", `{"answer_rate":0.5,"gold_retrieved_rate":0}`, new(float64), "gold retrieved 0%"},
		{"from before it existed", `{"answer_rate":0.5}`, nil, "retrieval errors 0.0%  truncated"},
	} {
		var h Health
		if err := json.Unmarshal([]byte(c.record), &h); err != nil {
			t.Fatal(err)
		}
		v, ok := h.Value("gold_retrieved_rate")
		if ok != (c.want != nil) || (c.want != nil && v != *c.want) || (c.want == nil && v != 0) {
			t.Errorf("%s: Value = %v, %v; want %v", c.name, v, ok, c.want)
		}
		if line := HealthLine(&h); !strings.Contains(line, c.line) {
			t.Errorf("%s: health line %q lacks %q", c.name, line, c.line)
		}
		b, err := json.Marshal(&h)
		if err != nil {
			t.Fatal(err)
		}
		if has := strings.Contains(string(b), `"gold_retrieved_rate"`); has != (c.want != nil) {
			t.Errorf("%s: written again as %s", c.name, b)
		}
	}
	if !slices.Contains(HealthMetrics, "gold_retrieved_rate") {
		t.Error("HealthMetrics lacks gold_retrieved_rate")
	}
	if got := turnFlags(TurnRecord{Action: "search", GoldRetrieved: true}); got != " · gold answer in the passages" {
		t.Errorf("turn flags %q", got)
	}
}
