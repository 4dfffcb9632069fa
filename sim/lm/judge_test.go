package lm

import (
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy/format"
)

// TestJudgeCritiqueCases checks what the judge says for each kind of
// trajectory.
func TestJudgeCritiqueCases(t *testing.T) {
	f := getFixture(t)
	js := NewJudge(f.corpus)
	q := f.hotpot[2] // Frank Lowy; the bid's passage does not name him in its title
	noSearch := thoughtAnswer + "<answer> unknown </answer>"
	c := js.Critique(judgePrompt(q.Q, q.Answers, noSearch))
	title := quoted(c)
	if !strings.Contains(c, "without searching") || title == "" {
		t.Fatalf("no-search critique %q", c)
	}
	// It names a passage to search for, not the answer.
	if strings.Contains(format.Normalize(c), format.Normalize(q.Answers[0])) {
		t.Errorf("critique %q states the gold answer %q", c, q.Answers[0])
	}
	found := false
	for _, p := range f.corpus {
		if strings.HasPrefix(p, "\""+title+"\"\n") && containsGold(p, q.Answers) {
			found = true
		}
	}
	if !found {
		t.Errorf("the critique's title %q is not a passage holding %v", title, q.Answers)
	}
	// Searched, but missed the passage.
	missed := thoughtSearch + "<search> FIFA </search>" + format.InfoBlock(f.corpus[100:103]) + noSearch
	if c := js.Critique(judgePrompt(q.Q, q.Answers, missed)); !strings.Contains(c, "missed") || quoted(c) != title {
		t.Errorf("missed critique %q", c)
	}
	// Retrieved the right passage, answered wrongly.
	var gold string
	for _, p := range f.corpus {
		if strings.HasPrefix(p, "\""+title+"\"\n") {
			gold = p
		}
	}
	read := thoughtSearch + "<search> x </search>" + format.InfoBlock([]string{gold}) + noSearch
	if c := js.Critique(judgePrompt(q.Q, q.Answers, read)); !strings.Contains(c, "retrieved the right passage") {
		t.Errorf("retrieved critique %q", c)
	}
	// No gold: a question entity not searched yet, then a generic line.
	c = js.Critique(judgePrompt(q.Q, nil, noSearch))
	ent := quoted(c)
	if ent == "" || !strings.Contains(q.Q, ent) {
		t.Errorf("no-gold critique %q does not quote a question entity", c)
	}
	searchedAll := ""
	for _, e := range entities(format.NormalizeQuestion(q.Q), true) {
		searchedAll += "<search> " + e + " </search>"
	}
	if c := js.Critique(judgePrompt(q.Q, nil, searchedAll)); quoted(c) != "" {
		t.Errorf("every entity searched: critique %q still quotes one", c)
	}
	if c := js.Critique("no question here"); !strings.Contains(c, "cannot find the question") {
		t.Errorf("critique without a question: %q", c)
	}
	// Yes/no gold answers give no passage to look for.
	yn := f.hotpot[3]
	if c := js.Critique(judgePrompt(yn.Q, yn.Answers, noSearch)); strings.Contains(c, "first and answer from that passage") {
		t.Errorf("yes/no question: critique %q", c)
	}
}
