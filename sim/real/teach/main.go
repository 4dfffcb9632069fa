// Command teach writes the short lesson that teaches `make real`'s tiny
// model its two parts, as token ids in Qwen3's chat template (the
// program's own: roles.Qwen3Chat and the built-in Qwen3 tokenizer):
//
//   - the agent: Search-R1 prompts (format.UserPrompt) answered by turns
//     that think, search, read an <information> block (format.InfoBlock)
//     and answer;
//   - the judge: the program's critique request (orchestrator.JudgeSystem
//     and the default judge prompt) about a failed trajectory, answered by
//     a short directive critique with no agent tags and no gold answer,
//     ended by <|im_end|>.
//
// The model made from random weights learns the forms, not the questions:
// with it a run against the real servers searches, reads retrieved
// passages, answers and gets critiques the program accepts, so every path
// of a step meets the real servers (sim/real/README.md).
//
// Usage: go run ./sim/real/teach -repo . -n 3264 > lesson.jsonl
//
// Each line is {"kind": "agent"|"judge", "ids": [...], "train": [...]}:
// train is 1 on the tokens the model learns to write (the turns, the
// critique), 0 on the prompts and on the <information> blocks. Every
// third example is the judge's; every agent example searches. The output depends only on -seed, -n and the
// shipped data.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/clients/policy/tokenizer"
	"github.com/hindsearch/hindsearch/orchestrator"
	"github.com/hindsearch/hindsearch/orchestrator/dataset"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
)

func main() {
	repo := flag.String("repo", ".", "the repository root (the shipped data is read from recipes/data)")
	n := flag.Int("n", 3264, "examples to write")
	seed := flag.Uint64("seed", 1, "the lesson's seed")
	flag.Parse()
	if err := run(os.Stdout, *repo, *n, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "teach:", err)
		os.Exit(1)
	}
}

type example struct {
	// Kind is "agent" or "judge".
	Kind  string `json:"kind"`
	IDs   []int  `json:"ids"`
	Train []int8 `json:"train"`
}

// thoughts are the think turns the lesson writes: short, so the model's
// turns end within rollout.max_turn_tokens of the real-server recipe.
var thoughts = []string{
	"I need to search for it.",
	"I should look this up.",
	"Let me search.",
}

var answered = []string{
	"I found the answer.",
	"The passages say it.",
	"Now I know.",
}

func run(w *os.File, repo string, n int, seed uint64) error {
	tk, err := tokenizer.Qwen3()
	if err != nil {
		return err
	}
	var qs []dataset.Question
	for _, f := range []string{"nq", "hotpotqa", "triviaqa"} {
		q, err := dataset.Load(filepath.Join(repo, "recipes/data/qa", f+".jsonl"))
		if err != nil {
			return err
		}
		qs = append(qs, q...)
	}
	passages, err := dataset.LoadCorpus(filepath.Join(repo, "recipes/data/corpus/passages.jsonl"))
	if err != nil {
		return err
	}
	judgePrompt, err := orchestrator.ParseJudgePrompt("")
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(seed, 0x7ea))
	enc := json.NewEncoder(w)
	for i := range n {
		q := qs[rng.IntN(len(qs))]
		ex := example{Kind: "agent"}
		add := func(text string, train bool) {
			ids := tk.Encode(text)
			ex.IDs = append(ex.IDs, ids...)
			for range ids {
				if train {
					ex.Train = append(ex.Train, 1)
				} else {
					ex.Train = append(ex.Train, 0)
				}
			}
		}
		if i%3 == 2 {
			// A critique: the judge's request about a failed trajectory.
			ex.Kind = "judge"
			failed := "<think> " + thoughts[rng.IntN(len(thoughts))] + " </think>\n<search> " + query(q.Question, rng) +
				" </search>\n\n<information>Doc 1(Title: " + title(passages[rng.IntN(len(passages))]) + ")</information>\n\n" +
				"<answer> " + query(q.Question, rng) + " </answer>"
			var golds []string
			if rng.IntN(4) != 0 { // the no-gold ablation's requests too
				golds = q.Golds
			}
			p, err := orchestrator.JudgePrompt(judgePrompt, q.Question, golds, failed)
			if err != nil {
				return err
			}
			add(roles.Qwen3Chat([]policy.Message{{Role: "system", Content: orchestrator.JudgeSystem}, {Role: "user", Content: p}}, true), false)
			add(Critique+"<|im_end|>", true)
			if err := enc.Encode(ex); err != nil {
				return err
			}
			continue
		}
		prompt := roles.Qwen3Chat([]policy.Message{{Role: "user", Content: format.UserPrompt(q.Question, "")}}, true)
		add(prompt, false)
		// Every example searches (once, or twice one time in five): a run's
		// failed trajectories then carry search tokens for the OPD term.
		searches := 1
		if rng.IntN(5) == 0 {
			searches = 2
		}
		for range searches {
			add("<think> "+thoughts[rng.IntN(len(thoughts))]+" </think>\n<search> "+query(q.Question, rng)+" </search>", true)
			var docs []string
			for range 3 {
				p := passages[rng.IntN(len(passages))]
				if len(p) > 300 {
					p = p[:300]
				}
				docs = append(docs, p)
			}
			add(format.InfoBlock(docs), false)
		}
		add("<think> "+answered[rng.IntN(len(answered))]+" </think>\n<answer> "+q.Golds[0]+" </answer>", true)
		if err := enc.Encode(ex); err != nil {
			return err
		}
	}
	return nil
}

// Critique is the one critique the lesson's judge writes, whatever the
// trajectory: directive, no tags, no answer. A fixed text is what a
// 2-layer model learns to write greedily on any request, on any processor
// (make_model.py checks it), so every failed trajectory of a run gets a
// critique the program accepts and the teacher scores; what the critique
// says is not under test here (make real-learn is where hints matter).
const Critique = "Search for the passage that names the answer, then answer from that passage."

// title is a passage's first line.
func title(p string) string {
	if i := strings.IndexByte(p, '\n'); i >= 0 {
		return p[:i]
	}
	return p
}

// query is a few consecutive words of the question, as a search agent's
// first query often is.
func query(question string, rng *rand.Rand) string {
	words := strings.Fields(strings.TrimRight(question, "?"))
	if len(words) <= 4 {
		return strings.Join(words, " ")
	}
	k := 3 + rng.IntN(3)
	if k > len(words) {
		k = len(words)
	}
	at := rng.IntN(len(words) - k + 1)
	return strings.Join(words[at:at+k], " ")
}
