// Command learn writes the task `make real-learn` trains a real model on:
// made-up storage units, a passage about each, questions that list several
// units and ask one attribute of one of them, and the lesson that teaches
// a new model the agent's skills but not the task's rules. Nothing is
// fetched; the output depends only on its flags.
//
// Usage: go run ./sim/real/learn -out DIR [-seed 1] [-lesson-units 500] [-rl-units 400] [-eval-units 200]
//
//	go run ./sim/real/learn check [-min-em 20] [-min-reward 0.2] RUN_DIR...
//
// The second form is make real-learn's verdict: for each finished run of
// sim/real/learn.yaml, the held-out greedy EM at step 0 and at the last
// evaluation, the mean sampled reward of the first and last five steps,
// the share of trajectories whose search retrieved the gold
// passage, the critiques and OPD tokens; it exits 1 unless every arm's EM
// rose by -min-em points (on -min-questions questions or more) and its
// reward by -min-reward.
//
// DIR receives (sim/real/README.md, "A real model learns"):
//
//   - units-corpus.jsonl: one wiki-18 passage a unit, its title line
//     "Unit NAME" and three attributes: "Unit KAVOR is a storage unit with
//     code ZUMET, pin DIXAL and lock GOPEN." Names and values are made-up
//     capital words (words), each unique, so a search for "Unit NAME"
//     retrieves that unit first and no title holds an answer.
//   - units-train.jsonl: the RL questions (FlashRAG JSONL), one per RL
//     unit, shuffled, each asking its pin: "Units JEVIK, KAVOR, NUDAP and
//     XOLET share a floor. What is the pin of unit KAVOR?", gold ["DIXAL"].
//     The listed units are RL units, the asked one at a random place.
//   - units-eval.jsonl: the held-out questions, the same form, one per
//     unit that no lesson or RL question names.
//   - lesson.jsonl: the lesson's examples as text segments, each trained or
//     not ({"kind", "segments": [[text, train], ...]}), in Qwen3's chat
//     template (roles.Qwen3Chat) with the program's prompt and
//     <information> block (format.UserPrompt, format.InfoBlock). A plain
//     example searches one of the listed units uniformly (or, one time in
//     five, a span that names no unit) and answers one of the retrieved
//     passage's three values uniformly: the format and the copying, not
//     which unit or which value. A hinted example (three in ten) carries
//     the teacher context's hint (hindsight.hint_template's default, "Hint:
//     " then a critique written by the embedded simulated judge's own code,
//     sim/lm) quoting a unit drawn uniformly from the listed ones, not the
//     asked one, and searches the quoted unit: the student learns to follow
//     a hint, and nothing of the rule from it.
//   - words.txt: every name and value, one a line: the model's tokenizer
//     makes each of them one token (learn_model.py).
//   - checks.jsonl: held-out questions (eval units) with what learn_model.py's
//     acceptance checks need: the prompt with and without a hint, the asked
//     and quoted units, the right search turn, the right passage's block,
//     the gold.
//   - texts.txt: the texts the model's tokenizer is trained on (every
//     passage, question and lesson segment).
//
// The two rules RL has to find are each one token's context: the unit to
// search is the listed name after "unit" (the others follow "Units", a
// comma or "and"), the value to answer the one after "pin". A model whose
// attention reads the previous token (learn_model.py builds one) can
// learn either by one change of what its copy heads look for; a rule on
// an attribute named elsewhere in the question would need a second hop,
// beyond a few LoRA steps.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/orchestrator"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/sim/lm"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "check" {
		if err := runCheck(os.Stdout, os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "learn:", err)
			os.Exit(1)
		}
		return
	}
	out := flag.String("out", "", "the directory to write into (created)")
	seed := flag.Uint64("seed", 1, "the task's seed")
	var sz sizes
	flag.IntVar(&sz.lessonUnits, "lesson-units", 500, "units only the lesson names")
	flag.IntVar(&sz.rlUnits, "rl-units", 400, "units of the RL questions (one question each)")
	flag.IntVar(&sz.evalUnits, "eval-units", 200, "held-out units (one question each)")
	flag.IntVar(&sz.lesson, "lesson", 12800, "lesson examples to write")
	flag.IntVar(&sz.checks, "checks", 200, "held-out acceptance-check questions to write")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "learn: -out is required")
		os.Exit(2)
	}
	if err := run(*out, *seed, sz); err != nil {
		fmt.Fprintln(os.Stderr, "learn:", err)
		os.Exit(1)
	}
}

// sizes are the task's counts.
type sizes struct {
	lessonUnits, rlUnits, evalUnits int
	lesson, checks                  int
}

// attrs are the units' attributes, in passage order.
var attrs = []string{"code", "pin", "lock"}

// askedAttr is the attribute every RL and held-out question asks (the
// lesson's ask any): the value to answer is then the one after its word.
const askedAttr = 1

// Letters of the made-up words: consonants that begin no word of the
// task's other texts (the instruction, the turns, the judge's sentences),
// so that the tokenizer's merges for the words never cut another word.
const (
	consonants = "GJKLMNPRVXZ"
	vowels     = "AEIOU"
)

// words returns n distinct made-up capital words of five letters,
// consonant-vowel-consonant-vowel-consonant, not in taken. They are drawn
// stem by stem (a stem is the first three letters, each stem giving up to
// 55 words), so that the tokenizer needs few merges beside one a word:
// every word is one token (learn_model.py), and a model copies a name or a
// value as one token.
func words(rng *rand.Rand, n int, taken map[string]bool) []string {
	var out []string
	for len(out) < n {
		stem := string(consonants[rng.IntN(len(consonants))]) + string(vowels[rng.IntN(len(vowels))]) +
			string(consonants[rng.IntN(len(consonants))])
		for _, i := range rng.Perm(len(vowels) * len(consonants)) {
			w := stem + string(vowels[i/len(consonants)]) + string(consonants[i%len(consonants)])
			if !taken[w] && len(out) < n {
				taken[w] = true
				out = append(out, w)
			}
		}
	}
	return out
}

// listed is how many units a question lists.
const listed = 4

// lessonTexts is how many lesson examples texts.txt holds: enough for the
// tokenizer to learn the prompt's and the turns' frequencies.
const lessonTexts = 2000

// unit is one made-up storage unit.
type unit struct {
	id     string
	values [3]string
}

func (u unit) title() string { return "Unit " + u.id }

// contents is the unit's wiki-18 passage: a quoted title line, then text.
func (u unit) contents() string {
	return fmt.Sprintf("\"%s\"\n%s is a storage unit with %s %s, %s %s and %s %s.", u.title(), u.title(),
		attrs[0], u.values[0], attrs[1], u.values[1], attrs[2], u.values[2])
}

// question lists the asked unit among listed-1 others of pool, the asked
// one at a random place, and asks attribute a of it.
type question struct {
	ID     string   `json:"id"`
	Text   string   `json:"question"`
	Golds  []string `json:"golden_answers"`
	Set    string   `json:"dataset"`
	asked  unit
	units  []unit
	attr   int
	askedI int
}

func makeQuestion(rng *rand.Rand, id, set string, asked unit, attr int, pool []unit) question {
	us := []unit{asked}
	for len(us) < listed {
		o := pool[rng.IntN(len(pool))]
		ok := true
		for _, u := range us {
			ok = ok && u.id != o.id
		}
		if ok {
			us = append(us, o)
		}
	}
	rng.Shuffle(len(us), func(i, j int) { us[i], us[j] = us[j], us[i] })
	ids := make([]string, len(us))
	at := 0
	for i, u := range us {
		ids[i] = u.id
		if u.id == asked.id {
			at = i
		}
	}
	text := fmt.Sprintf("Units %s and %s share a floor. What is the %s of unit %s?",
		strings.Join(ids[:len(ids)-1], ", "), ids[len(ids)-1], attrs[attr], asked.id)
	return question{ID: id, Text: text, Golds: []string{asked.values[attr]}, Set: set,
		asked: asked, units: us, attr: attr, askedI: at}
}

// Turn texts: short and fixed, so that the choices are all the model
// learns in them.
const (
	searchThought = "<think> I will search one of the units. </think>\n"
	answerThought = "<think> The passage gives the value. </think>\n"
)

func searchTurn(query string) string { return searchThought + "<search> " + query + " </search>" }
func answerTurn(value string) string { return answerThought + "<answer> " + value + " </answer>" }

// offTopic are the searches of a plain example that name no unit: a
// retriever answers them with an arbitrary unit.
var offTopic = []string{"storage unit", "the floor", "units on a floor", "which unit"}

type example struct {
	Kind     string   `json:"kind"`
	Segments [][2]any `json:"segments"`
}

type check struct {
	Prompt       string   `json:"prompt"`
	HintedPrompt string   `json:"hinted_prompt"`
	Listed       []string `json:"listed"`
	Asked        string   `json:"asked"`
	Quoted       string   `json:"quoted"`
	RightTurn    string   `json:"right_turn"`
	RightInfo    string   `json:"right_info"`
	Gold         string   `json:"gold"`
	Values       []string `json:"values"`
}

func run(out string, seed uint64, sz sizes) error {
	for _, c := range []struct {
		flag string
		n    int
	}{{"-lesson-units", sz.lessonUnits}, {"-rl-units", sz.rlUnits}, {"-eval-units", sz.evalUnits}} {
		if c.n < listed || c.n > 5000 {
			return fmt.Errorf("%s %d: want %d to 5000", c.flag, c.n, listed)
		}
	}
	nUnits := sz.lessonUnits + sz.rlUnits + sz.evalUnits
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(seed, 0x0417))
	taken := map[string]bool{}
	names := words(rng, nUnits, taken)
	vals := words(rng, len(attrs)*nUnits, taken)
	rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	rng.Shuffle(len(vals), func(i, j int) { vals[i], vals[j] = vals[j], vals[i] })
	us := make([]unit, nUnits)
	for i := range us {
		us[i].id = names[i]
		for a := range attrs {
			us[i].values[a] = vals[len(attrs)*i+a]
		}
	}
	lessonU, rlU, evalU := us[:sz.lessonUnits], us[sz.lessonUnits:sz.lessonUnits+sz.rlUnits], us[sz.lessonUnits+sz.rlUnits:]

	var texts []string
	corpus := make([]string, len(us))
	var rows []any
	for i, u := range us {
		corpus[i] = u.contents()
		texts = append(texts, corpus[i])
		rows = append(rows, map[string]string{"id": strconv.Itoa(i), "contents": corpus[i]})
	}
	if err := writeJSONL(filepath.Join(out, "units-corpus.jsonl"), rows); err != nil {
		return err
	}

	// RL questions: one a RL unit, shuffled.
	var train []any
	for _, u := range rlU {
		train = append(train, makeQuestion(rng, "", "units", u, askedAttr, rlU))
	}
	rng.Shuffle(len(train), func(i, j int) { train[i], train[j] = train[j], train[i] })
	for i := range train {
		q := train[i].(question)
		q.ID = fmt.Sprintf("train_%d", i)
		train[i] = q
		texts = append(texts, q.Text)
	}
	if err := writeJSONL(filepath.Join(out, "units-train.jsonl"), train); err != nil {
		return err
	}
	// Held-out questions: one a held-out unit, shuffled.
	var evalQ []any
	var evalQs []question
	for _, u := range evalU {
		evalQs = append(evalQs, makeQuestion(rng, "", "units", u, askedAttr, evalU))
	}
	rng.Shuffle(len(evalQs), func(i, j int) { evalQs[i], evalQs[j] = evalQs[j], evalQs[i] })
	for i := range evalQs {
		evalQs[i].ID = fmt.Sprintf("eval_%d", i)
		evalQ = append(evalQ, evalQs[i])
		texts = append(texts, evalQs[i].Text)
	}
	if err := writeJSONL(filepath.Join(out, "units-eval.jsonl"), evalQ); err != nil {
		return err
	}

	judge := lm.NewJudge(corpus)
	tmpl, err := orchestrator.ParseJudgePrompt("")
	if err != nil {
		return err
	}
	hintTemplate := recipes.Defaults().Hindsight.HintTemplate
	hint := func(q question, student string, quoted unit, info string) (string, error) {
		// The judge is asked about a made-up failure of the student, with
		// the quoted unit's value as the gold answer: it quotes that unit,
		// in the sentence its rules pick for the student's searches.
		resp := student + info + answerTurn("0")
		p, err := orchestrator.JudgePrompt(tmpl, q.Text, []string{quoted.values[q.attr]}, resp)
		if err != nil {
			return "", err
		}
		c := judge.Critique(p)
		if !strings.Contains(c, `"`+quoted.title()+`"`) {
			return "", fmt.Errorf("the simulated judge's critique %q does not quote %s", c, quoted.title())
		}
		return strings.ReplaceAll(hintTemplate, recipes.CritiquePlaceholder, c), nil
	}
	chat := func(user string) string {
		return roles.Qwen3Chat([]policy.Message{{Role: "user", Content: user}}, true)
	}

	var lesson []any
	for range sz.lesson {
		asked := lessonU[rng.IntN(len(lessonU))]
		q := makeQuestion(rng, "", "lesson", asked, rng.IntN(len(attrs)), lessonU)
		ex := example{Kind: "plain"}
		h := ""
		var searched unit
		query := ""
		if rng.IntN(10) < 3 {
			ex.Kind = "hinted"
			quoted := q.units[rng.IntN(listed)]
			// What the student did before the critique: a listed unit or
			// an off-topic span.
			before := q.units[rng.IntN(listed)]
			bq := before.title()
			if rng.IntN(5) == 0 {
				bq = offTopic[rng.IntN(len(offTopic))]
				before = lessonU[rng.IntN(len(lessonU))]
			}
			if h, err = hint(q, searchTurn(bq), quoted, format.InfoBlock([]string{before.contents()})); err != nil {
				return err
			}
			searched, query = quoted, quoted.title()
			if rng.IntN(20) == 0 { // p 0.95 of following the hint
				searched = q.units[rng.IntN(listed)]
				query = searched.title()
			}
		} else {
			searched = q.units[rng.IntN(listed)]
			query = searched.title()
			if rng.IntN(5) == 0 {
				query = offTopic[rng.IntN(len(offTopic))]
				searched = lessonU[rng.IntN(len(lessonU))]
			}
		}
		info := format.InfoBlock([]string{searched.contents()})
		ex.Segments = [][2]any{
			{chat(format.UserPrompt(q.Text, h)), 0},
			{searchTurn(query), 1},
			{info, 0},
			{answerTurn(searched.values[rng.IntN(len(attrs))]), 1},
		}
		if len(lesson) < lessonTexts {
			for _, s := range ex.Segments {
				texts = append(texts, s[0].(string))
			}
		}
		lesson = append(lesson, ex)
	}
	if err := writeJSONL(filepath.Join(out, "lesson.jsonl"), lesson); err != nil {
		return err
	}

	var checks []any
	for i := 0; i < sz.checks && i < len(evalQs); i++ {
		q := evalQs[i]
		quoted := q.units[rng.IntN(listed)]
		other := q.units[(q.askedI+1+rng.IntN(listed-1))%listed]
		h, err := hint(q, searchTurn(other.title()), quoted, format.InfoBlock([]string{other.contents()}))
		if err != nil {
			return err
		}
		c := check{Prompt: chat(format.UserPrompt(q.Text, "")), HintedPrompt: chat(format.UserPrompt(q.Text, h)),
			Asked: q.asked.title(), Quoted: quoted.title(), RightTurn: searchTurn(q.asked.title()),
			RightInfo: format.InfoBlock([]string{q.asked.contents()}), Gold: q.Golds[0]}
		for _, u := range q.units {
			c.Listed = append(c.Listed, u.title())
		}
		c.Values = append(c.Values, q.asked.values[:]...)
		checks = append(checks, c)
	}
	if err := writeJSONL(filepath.Join(out, "checks.jsonl"), checks); err != nil {
		return err
	}
	rows = rows[:0]
	for _, t := range texts {
		rows = append(rows, t) // one JSON string a line
	}
	if err := writeJSONL(filepath.Join(out, "texts.txt"), rows); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "words.txt"), []byte(strings.Join(append(names, vals...), "\n")+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "learn: %d units (%d lesson, %d RL, %d held out), %d RL and %d held-out questions, %d lesson examples, %d checks in %s\n",
		nUnits, len(lessonU), len(rlU), len(evalU), len(train), len(evalQ), len(lesson), len(checks), out)
	return nil
}

// writeJSONL writes rows as JSON lines to path.
func writeJSONL(path string, rows []any) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			f.Close()
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}
