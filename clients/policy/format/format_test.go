package format_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy/format"
)

// searchR1Prefix is Search-R1's make_prefix instruction, written out here
// independently of format.Instruction (PROTOCOLS.md §1), typo included.
const searchR1Prefix = "Answer the given question. " +
	"You must conduct reasoning inside <think> and </think> first every time you get new information. " +
	"After reasoning, if you find you lack some knowledge, you can call a search engine by <search> query </search> and it will return the top searched results between <information> and </information>. " +
	"You can search as many times as your want. " +
	"If you find no further external knowledge needed, you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. For example, <answer> Beijing </answer>. Question: "

func TestUserPromptIsSearchR1Prompt(t *testing.T) {
	cases := []struct{ q, want string }{
		{"who wrote hamlet", searchR1Prefix + "who wrote hamlet?\n"},
		{"who wrote hamlet?", searchR1Prefix + "who wrote hamlet?\n"},
		{"  who wrote hamlet \n", searchR1Prefix + "who wrote hamlet?\n"},
		{"\twhen was it? ", searchR1Prefix + "when was it?\n"},
		{"is it a question?!", searchR1Prefix + "is it a question?!?\n"},
		{"Where is São Paulo", searchR1Prefix + "Where is São Paulo?\n"},
	}
	for _, c := range cases {
		if got := format.UserPrompt(c.q, ""); got != c.want {
			t.Errorf("UserPrompt(%q, \"\"):\n got %q\nwant %q", c.q, got, c.want)
		}
	}
	if !strings.Contains(format.Instruction, "as many times as your want.") {
		t.Error(`Instruction lost Search-R1's typo "as your want"`)
	}
	if format.Instruction+"Question: " != searchR1Prefix {
		t.Errorf("Instruction:\n got %q\nwant %q", format.Instruction+"Question: ", searchR1Prefix)
	}
}

func TestUserPromptWithHint(t *testing.T) {
	hint := "Hint: search for the author of the play.\n"
	got := format.UserPrompt("who wrote hamlet", hint)
	want := strings.TrimSuffix(searchR1Prefix, "Question: ") + hint + "Question: who wrote hamlet?\n"
	if got != want {
		t.Errorf("UserPrompt with hint:\n got %q\nwant %q", got, want)
	}
	i, j := strings.Index(got, hint), strings.Index(got, "Question: who")
	if i < 0 || i+len(hint) != j {
		t.Errorf("hint at %d (len %d), Question: at %d: want the hint right before the question", i, len(hint), j)
	}
	if strings.HasPrefix(got, hint) || !strings.HasPrefix(got, format.Instruction) {
		t.Error("the prompt must start with the instruction, not the hint")
	}
}

func TestNormalizeQuestion(t *testing.T) {
	for in, want := range map[string]string{
		"a":        "a?",
		"a?":       "a?",
		" a ? ":    "a ?",
		"a?\n":     "a?",
		"what? no": "what? no?",
	} {
		if got := format.NormalizeQuestion(in); got != want {
			t.Errorf("NormalizeQuestion(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseAction(t *testing.T) {
	cases := []struct {
		name, text, kind, content string
	}{
		{"search", "<think>hmm</think><search> capital of France </search>", "search", "capital of France"},
		{"answer", "<answer> Paris </answer>", "answer", "Paris"},
		{"mismatched tags", "<search> a </answer> <answer> b </answer>", "answer", "b"},
		{"first of several", "<search>q1</search><answer>x</answer><search>q2</search>", "search", "q1"},
		{"answer before search", "<answer>x</answer><search>q</search>", "answer", "x"},
		{"unclosed first", "<search> never closed <answer> y </answer>", "answer", "y"},
		{"nested same tag", "<search><search> inner </search></search>", "search", "<search> inner"},
		{"nested other tag", "<answer> <search> q </search> </answer>", "answer", "<search> q </search>"},
		{"newlines inside", "<search>\nline one\nline two\n</search>", "search", "line one\nline two"},
		{"empty content", "<answer></answer>", "answer", ""},
		{"whitespace content", "<search> \n\t </search>", "search", ""},
		{"no action", "I think the answer is Paris.", "", ""},
		{"closing only", "</search></answer>", "", ""},
		{"open only", "<search> q", "", ""},
		{"case sensitive", "<SEARCH> q </SEARCH>", "", ""},
		{"attribute not a tag", "<search id=1> q </search>", "", ""},
		{"lazy match", "<answer> a </answer> and </answer>", "answer", "a"},
		{"other tags only", "<think> x </think><information> y </information>", "", ""},
		{"stop token after", "<search> q </search>\n", "search", "q"},
		{"unicode content", "<answer>  Zürich – Ελλάδα  </answer>", "answer", "Zürich – Ελλάδα"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kind, content := format.ParseAction(c.text)
			if kind != c.kind || content != c.content {
				t.Errorf("ParseAction(%q) = (%q, %q), want (%q, %q)", c.text, kind, content, c.kind, c.content)
			}
		})
	}
}

func TestActionSpan(t *testing.T) {
	cases := []struct {
		text, kind, content string
		start, end          int
	}{
		{"<search> q </search>", "search", "q", 0, 20},
		{"<think>x</think> <search>q</search>\n", "search", "q", 17, 35},
		{"<search> a </answer> <answer> b </answer>", "answer", "b", 21, 41},
		{"no action here", "", "", -1, -1},
		{"", "", "", -1, -1},
		{"é<answer>ü</answer>", "answer", "ü", 2, 21},
	}
	for _, c := range cases {
		kind, content, start, end := format.ActionSpan(c.text)
		if kind != c.kind || content != c.content || start != c.start || end != c.end {
			t.Errorf("ActionSpan(%q) = (%q, %q, %d, %d), want (%q, %q, %d, %d)",
				c.text, kind, content, start, end, c.kind, c.content, c.start, c.end)
			continue
		}
		if kind != "" {
			span := c.text[start:end]
			if !strings.HasPrefix(span, "<"+kind+">") || !strings.HasSuffix(span, "</"+kind+">") {
				t.Errorf("ActionSpan(%q): span %q is not a whole %s action", c.text, span, kind)
			}
		}
	}
}

func TestInfoBlock(t *testing.T) {
	got := format.InfoBlock([]string{
		"\"Paris\"\nParis is the capital of France.",
		"\"France\"\nFrance is a country.\nSecond line.",
	})
	want := "\n\n<information>Doc 1(Title: \"Paris\") Paris is the capital of France.\n" +
		"Doc 2(Title: \"France\") France is a country.\nSecond line.</information>\n\n"
	if got != want {
		t.Errorf("InfoBlock, 2 hits:\n got %q\nwant %q", got, want)
	}

	if got, want := format.InfoBlock(nil), "\n\n<information></information>\n\n"; got != want {
		t.Errorf("InfoBlock, no hits: got %q, want %q", got, want)
	}
	if got, want := format.InfoBlock([]string{}), "\n\n<information></information>\n\n"; got != want {
		t.Errorf("InfoBlock, empty hits: got %q, want %q", got, want)
	}

	// A passage without a newline is all title and an empty text (Python:
	// content.split("\n")[0] and "\n".join(content.split("\n")[1:])); the
	// whole docs string is stripped, so the trailing space goes too.
	if got, want := format.InfoBlock([]string{"  Only a title"}), "\n\n<information>Doc 1(Title:   Only a title)</information>\n\n"; got != want {
		t.Errorf("InfoBlock, title only:\n got %q\nwant %q", got, want)
	}
	got = format.InfoBlock([]string{"\"T\"\ntext  \n"})
	if want := "\n\n<information>Doc 1(Title: \"T\") text</information>\n\n"; got != want {
		t.Errorf("InfoBlock, trailing white space:\n got %q\nwant %q", got, want)
	}

	// Double-digit numbering.
	hits := make([]string, 12)
	for i := range hits {
		hits[i] = fmt.Sprintf("\"T%d\"\nx", i+1)
	}
	got = format.InfoBlock(hits)
	if !strings.Contains(got, "Doc 10(Title: \"T10\") x\nDoc 11(Title: \"T11\") x\nDoc 12(Title: \"T12\") x</information>") {
		t.Errorf("InfoBlock, 12 hits: %q", got)
	}
}

func TestInvalidActionAndStops(t *testing.T) {
	want := "\nMy previous action is invalid. If I want to search, I should put the query between <search> and </search>. If I want to give the final answer, I should put the answer between <answer> and </answer>. Let me try again.\n"
	if format.InvalidActionText != want {
		t.Errorf("InvalidActionText = %q, want %q", format.InvalidActionText, want)
	}
	if len(format.StopStrings) != 2 || format.StopStrings[0] != "</search>" || format.StopStrings[1] != "</answer>" {
		t.Errorf("StopStrings = %q", format.StopStrings)
	}
}

func TestExtractAnswer(t *testing.T) {
	cases := []struct {
		resp, want string
		ok         bool
	}{
		{"<answer> Paris </answer>", "Paris", true},
		{"<answer>first</answer> more <answer>\n last \n</answer>", "last", true},
		{"<search>q</search>\n\n<information>Doc 1(Title: x) <answer>fake</answer></information>\n\n<answer>real</answer>", "real", true},
		{"<answer></answer>", "", true},
		{"no answer", "", false},
		{"<answer>unclosed", "", false},
		{"<answer>multi\nline</answer>", "multi\nline", true},
		{"<answer>a</answer><answer>b</answer><answer>c</answer>", "c", true},
	}
	for _, c := range cases {
		got, ok := format.ExtractAnswer(c.resp)
		if got != c.want || ok != c.ok {
			t.Errorf("ExtractAnswer(%q) = (%q, %v), want (%q, %v)", c.resp, got, ok, c.want, c.ok)
		}
	}
}

func TestNormalize(t *testing.T) {
	// Expected values are Python's SQuAD normalize_answer on the same input.
	cases := map[string]string{
		"The Eiffel Tower!":          "eiffel tower",
		"  An   apple\ta day\n":      "apple day",
		"U.S.A.":                     "usa",
		"Theatre and anthem":         "theatre and anthem",
		"A.B.":                       "ab",
		"a an the":                   "",
		"THE":                        "",
		"the_end":                    "theend",
		"O'Neill":                    "oneill",
		"rock-'n'-roll":              "rocknroll",
		"1,000":                      "1000",
		"Schrödinger's cat":          "schrödingers cat",
		"ÉCOLE":                      "école",
		"Café the Zürich":            "café zürich",
		"théâtre à Paris":            "théâtre à paris",
		"«quoted» text":              "«quoted» text",
		"Sofía Vergara":              "sofía vergara",
		"año":                        "año",
		"éthe":                       "éthe",
		"The 3a":                     "3a",
		"x\u0301a":                   "x\u0301",
		"":                           "",
		"!!!":                        "",
		"the (band)":                 "band",
		"Paris\u00a0\u2003France":    "paris france",
		"a\tb":                       "b",
		"New-York":                   "newyork",
		"the   beatles   the  the a": "beatles",
	}
	for in, want := range cases {
		if got := format.Normalize(in); got != want {
			t.Errorf("Normalize(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestExactMatch(t *testing.T) {
	cases := []struct {
		pred  string
		golds []string
		want  float64
	}{
		{"Paris", []string{"paris"}, 1},
		{"the Paris.", []string{"Paris"}, 1},
		{"  PARIS  ", []string{"paris"}, 1},
		{"Paris, France", []string{"Paris"}, 0},
		{"Lyon", []string{"Paris", "City of Light", "lyon"}, 1},
		{"Lyon", []string{"Paris", "Marseille"}, 0},
		{"", []string{"Paris"}, 0},
		{"", []string{"The"}, 1}, // both normalise to ""
		{"Paris", nil, 0},
		{"Zürich", []string{"zürich"}, 1},
		{"Zurich", []string{"Zürich"}, 0},
		{"an apple", []string{"Apple!"}, 1},
		{"theapple", []string{"the apple"}, 0},
	}
	for _, c := range cases {
		if got := format.ExactMatch(c.pred, c.golds); got != c.want {
			t.Errorf("ExactMatch(%q, %q) = %v, want %v", c.pred, c.golds, got, c.want)
		}
	}
}

// A gold answer is in a passage text when its normalised words occur
// there as whole words; several golds, any one will do.
func TestContainsAnswer(t *testing.T) {
	for _, c := range []struct {
		text  string
		golds []string
		want  bool
	}{
		{"Paris is the capital of France.", []string{"Paris"}, true},
		{"the capital is PARIS.", []string{"paris"}, true},                          // case and end punctuation
		{"It lies on the Seine, in Paris, France", []string{"Paris, France"}, true}, // several words, punctuation dropped in both
		{"Barack Obama was born in Hawaii", []string{"The Barack Obama"}, true},     // the gold's article
		{"Doc 1(Title: \"Paris\") The city", []string{"Paris"}, true},               // a title in quotes
		{"a Paris-based company", []string{"Paris"}, false},                         // one word after Normalize
		{"Obama's father", []string{"Obama"}, false},                                // likewise
		{"a party at the art museum", []string{"art"}, true},                        // whole word: "party" does not count...
		{"a party at the museum", []string{"art"}, false},                           // ...on its own
		{"this is not the answer", []string{"no"}, false},                           // a yes/no gold inside "not"
		{"the answer is no.", []string{"yes", "no"}, true},                          // several golds: the second
		{"nothing here", []string{"Lyon", "Marseille"}, false},                      // several golds: none
		{"the the the", []string{"The"}, false},                                     // a gold normalised to nothing
		{"Paris", nil, false},                                                       // no golds
		{"", []string{"Paris"}, false},                                              // no text
		{"in New York City", []string{"new york"}, true},                            // a prefix of a longer name, whole words
		{"in NewYork", []string{"new york"}, false},                                 // not the same words
		{"Zürich, Switzerland", []string{"zürich"}, true},
		{"a 1984 novel", []string{"1984"}, true},
		{"Doc 1(Title: X) text", []string{"1"}, false}, // InfoBlock's numbering is glued to "Title"
	} {
		if got := format.ContainsAnswer(c.text, c.golds); got != c.want {
			t.Errorf("ContainsAnswer(%q, %q) = %v, want %v", c.text, c.golds, got, c.want)
		}
	}
}

// The text between an <information> block's tags, of a whole block and of
// one cut short.
func TestInfoText(t *testing.T) {
	block := format.InfoBlock([]string{"\"Paris\"\nParis is the capital of France."})
	for _, c := range []struct{ shown, want string }{
		{block, "Doc 1(Title: \"Paris\") Paris is the capital of France."},
		{block[:len(block)-len("</information>\n\n")], "Doc 1(Title: \"Paris\") Paris is the capital of France."},
		{block[:len(block)-len("ormation>\n\n")], "Doc 1(Title: \"Paris\") Paris is the capital of France."}, // cut inside the closing tag
		{block[:len(block)-len("capital of France.</information>\n\n")], "Doc 1(Title: \"Paris\") Paris is the "},
		{"\n\n<information>", ""},
		{"\n\n<inform", ""}, // cut inside the opening tag: nothing shown
		{"", ""},
	} {
		if got := format.InfoText(c.shown); got != c.want {
			t.Errorf("InfoText(%q) = %q, want %q", c.shown, got, c.want)
		}
	}
	if format.InfoText(format.SearchFailedBlock) != "The search failed: no passages were returned." {
		t.Errorf("failed block: %q", format.InfoText(format.SearchFailedBlock))
	}
}

func TestF1(t *testing.T) {
	cases := []struct {
		pred  string
		golds []string
		want  float64
	}{
		{"Paris", []string{"paris"}, 1},
		// p = 1/2, r = 1: 2*(1/2)/(3/2) = 2/3.
		{"Barack Obama", []string{"Obama"}, 2.0 / 3},
		// p = 1/2, r = 1/3: 2*(1/6)/(5/6) = 2/5.
		{"paris france", []string{"paris texas usa"}, 0.4},
		// Counts are clipped: "paris paris" vs "paris": 1 common token.
		{"the the paris paris", []string{"paris"}, 2.0 / 3},
		// Articles and punctuation do not count.
		{"The United States of America.", []string{"united states"}, 2.0 / 3},
		// The best gold wins.
		{"paris france", []string{"lyon", "paris texas usa", "France Paris"}, 1},
		{"paris", []string{"lyon", "marseille"}, 0},
		{"", []string{"paris"}, 0},
		{"paris", nil, 0},
		// p = 2/3, r = 2/2: 2*(2/3)/(5/3) = 4/5.
		{"new york city", []string{"New York"}, 0.8},
		// Order does not matter.
		{"york new", []string{"new york"}, 1},
	}
	for _, c := range cases {
		if got := format.F1(c.pred, c.golds); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("F1(%q, %q) = %v, want %v", c.pred, c.golds, got, c.want)
		}
	}
}

// refSpan is a brute-force leftmost-shortest match of
// <(search|answer)>(.*?)</\1> with DOTALL, as Python's re.search finds it.
func refSpan(text string) (kind string, start, end int) {
	for i := range len(text) {
		for _, k := range []string{"search", "answer"} {
			if strings.HasPrefix(text[i:], "<"+k+">") {
				rest := text[i+len(k)+2:]
				if j := strings.Index(rest, "</"+k+">"); j >= 0 {
					return k, i, i + len(k) + 2 + j + len(k) + 3
				}
			}
		}
	}
	return "", -1, -1
}

func FuzzParseAction(f *testing.F) {
	for _, s := range []string{
		"<search> a </answer> <answer> b </answer>",
		"<search>q</search>",
		"<answer>\nx\n</answer>",
		"<search><search></search>",
		"</search><search>",
		"no action",
		"",
		"<answer>é</answer>\xff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		kind, content, start, end := format.ActionSpan(text)
		k2, c2 := format.ParseAction(text)
		if k2 != kind || c2 != content {
			t.Fatalf("ParseAction and ActionSpan disagree on %q", text)
		}
		if kind == format.ActionNone {
			if rk, _, _ := refSpan(text); rk != "" {
				t.Fatalf("missed a %s action in %q", rk, text)
			}
		}
		switch kind {
		case format.ActionNone:
			if content != "" || start != -1 || end != -1 {
				t.Fatalf("no action in %q but content %q span [%d,%d)", text, content, start, end)
			}
			if strings.Contains(text, "<search>") && strings.Contains(text[strings.Index(text, "<search>"):], "</search>") {
				t.Fatalf("missed a search action in %q", text)
			}
			if strings.Contains(text, "<answer>") && strings.Contains(text[strings.Index(text, "<answer>"):], "</answer>") {
				t.Fatalf("missed an answer action in %q", text)
			}
		case format.ActionSearch, format.ActionAnswer:
			if start < 0 || end > len(text) || start > end {
				t.Fatalf("bad span [%d,%d) of %q", start, end, text)
			}
			span := text[start:end]
			open, closing := "<"+kind+">", "</"+kind+">"
			if !strings.HasPrefix(span, open) || !strings.HasSuffix(span, closing) || len(span) < len(open)+len(closing) {
				t.Fatalf("span %q of %q is not a %s action", span, text, kind)
			}
			inner := span[len(open) : len(span)-len(closing)]
			if !strings.Contains(inner, content) || content != strings.TrimSpace(inner) {
				t.Fatalf("content %q is not the stripped inside %q of the span", content, inner)
			}
			if strings.Contains(inner, closing) {
				t.Fatalf("span %q is not the shortest match", span)
			}
			if rk, rs, re := refSpan(text); rk != kind || rs != start || re != end {
				t.Fatalf("ActionSpan(%q) = %s [%d,%d), reference %s [%d,%d)", text, kind, start, end, rk, rs, re)
			}
		default:
			t.Fatalf("unknown kind %q", kind)
		}
	})
}

func ExampleExactMatch() {
	fmt.Println(format.ExactMatch("The Eiffel Tower!", []string{"eiffel tower"}))
	fmt.Println(format.ExactMatch("Paris, France", []string{"Paris"}))
	fmt.Printf("%.3f\n", format.F1("Paris, France", []string{"Paris"}))
	// Output:
	// 1
	// 0
	// 0.667
}

func ExampleParseAction() {
	kind, content := format.ParseAction("<think>I need the author.</think>\n<search> author of Hamlet </search>")
	fmt.Printf("%s %q\n", kind, content)
	kind, content = format.ParseAction("<search> a </answer> <answer> b </answer>")
	fmt.Printf("%s %q\n", kind, content)
	kind, _ = format.ParseAction("The answer is Paris.")
	fmt.Printf("%q\n", kind)
	// Output:
	// search "author of Hamlet"
	// answer "b"
	// ""
}
