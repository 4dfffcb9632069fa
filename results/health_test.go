package results

import (
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
