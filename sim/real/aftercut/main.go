// Command aftercut asks a real instruct model served by vLLM what it writes
// after an <information> block cut at rollout.max_obs_tokens (issue 36,
// item 4), in contexts the program builds exactly as a rollout does, so
// that the answer does not wait on the model reaching a cut block by
// itself (SmolLM2-135M-Instruct, the one instruct model this machine
// reaches, seldom searches on its own).
//
// For each question of the recipe's eval datasets (eval.per_dataset each):
// the Search-R1 prompt in the model's chat template (the policy server's
// POST /tokenize with messages, as policy.tokenize server), one agent turn
// written here that thinks and searches the question itself, and the
// <information> block of the recipe's retriever for that query
// (format.InfoBlock, tokenized alone under policy.tokenizer). Two contexts
// follow from it: the block cut at -cap tokens (Search-R1's cut: the first
// tokens kept, nothing appended) and, as the control, the block whole. The
// model continues each with the rollout's sampling request (stop strings
// </search> and </answer>, rollout.max_turn_tokens), once greedily and
// -samples times at temperature 1 (a seed of its own each),
// policy.concurrency requests at a time. Each continuation is
// classified by results.AfterCutKind (closed, wrote_on, stopped, other; the
// same rule as the health's after_cut), "other" further by what it starts
// with (<think>, <search>, <answer>, text).
//
// Usage (make real-aftercut runs it; a vLLM must serve the recipe's model):
//
//	go run ./sim/real/aftercut -recipe sim/real/aftercut.yaml -cap 120 -samples 4 \
//	    -set policy.tokenizer=.../tokenizer.json -out runs/real-aftercut/forced-120.jsonl
//
// It prints a table of the shares per context and sampling, and writes
// every continuation (question id, context, seed, kind, text) to -out.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sourcegraph/conc/pool"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/orchestrator/dataset"
	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/results"
)

// sets collects repeated -set flags.
type sets []string

func (s *sets) String() string     { return strings.Join(*s, ",") }
func (s *sets) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	recipe := flag.String("recipe", "sim/real/aftercut.yaml", "the recipe: policy, retriever, rollout and eval keys are read")
	capTokens := flag.Int("cap", 120, "tokens of the <information> block kept in the cut context")
	samples := flag.Int("samples", 2, "continuations at temperature 1 per context, besides the greedy one")
	maxTokens := flag.Int("max-tokens", 0, "tokens each continuation may take (0: rollout.max_turn_tokens, as a rollout's turn)")
	out := flag.String("out", "", "write every continuation here as JSON lines (empty: none)")
	var set sets
	flag.Var(&set, "set", "override a recipe key (key=value), as orchestrate --set; repeatable")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *recipe, set, *capTokens, *samples, *maxTokens, *out); err != nil {
		fmt.Fprintln(os.Stderr, "aftercut:", err)
		os.Exit(1)
	}
}

// continuation is one answer of the model to one context.
type continuation struct {
	Question string `json:"question"`
	Dataset  string `json:"dataset"`
	// Context is "cut" (the block cut at -cap tokens) or "whole".
	Context string `json:"context"`
	// Sample is 0 for the greedy continuation, else 1..samples; Seed is
	// the sampling seed (distinct for every sampled continuation).
	Sample int   `json:"sample"`
	Seed   int64 `json:"seed,omitempty"`
	// Kind is results.AfterCutKind's; Opens is what an "other" one starts
	// with (think, search, answer, text).
	Kind  string `json:"kind"`
	Opens string `json:"opens,omitempty"`
	// ObsTokens is the block's length in tokens (before the cut).
	ObsTokens int    `json:"obs_tokens"`
	Tokens    int    `json:"tokens"`
	Text      string `json:"text"`
}

// job is one continuation to ask for.
type job struct {
	k      continuation
	prompt []int
}

func run(ctx context.Context, w io.Writer, path string, set []string, capTokens, samples, maxTokens int, out string) error {
	r, err := recipes.Load(path, set, os.Environ())
	if err != nil {
		return err
	}
	if err := setup.ApplyRunDefaults(r); err != nil {
		return err
	}
	deps, emb, err := setup.Connect(ctx, r, os.Environ(), io.Discard)
	if err != nil {
		return err
	}
	defer emb.Close()
	tok, err := deps.LocalTokenizer()
	if err != nil {
		return err
	}
	if len(deps.Policies) == 0 {
		return errors.New("policy.urls: no policy server")
	}
	pol := deps.Policies[0]
	evalSets, _, err := dataset.EvalSetsWithSubset(r)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(evalSets))
	for n := range evalSets {
		names = append(names, n)
	}
	sort.Strings(names)

	if maxTokens <= 0 || maxTokens > r.Rollout.MaxTurnTokens {
		maxTokens = r.Rollout.MaxTurnTokens
	}
	var jobs []job
	cut := 0
	for _, name := range names {
		for _, q := range evalSets[name] {
			prompt, err := pol.TokenizeChat(ctx, r.Policy.Model, []policy.Message{{Role: "user", Content: format.UserPrompt(q.Question, "")}}, true)
			if err != nil {
				return fmt.Errorf("tokenize the prompt: %w", err)
			}
			query := strings.TrimSuffix(strings.TrimSpace(q.Question), "?")
			turn := "<think> I need to find information about this question. </think>\n<search> " + query + " </search>"
			hits, err := deps.Retriever.Retrieve(ctx, []string{query}, r.Retriever.TopK)
			if err != nil {
				return fmt.Errorf("retrieve %q: %w", query, err)
			}
			contents := make([]string, 0, len(hits[0]))
			for _, h := range hits[0] {
				contents = append(contents, h.Contents)
			}
			if len(contents) == 0 {
				continue
			}
			block := tok.Vocab.AppendEncode(nil, format.InfoBlock(contents))
			if len(block) <= capTokens {
				continue // nothing to cut
			}
			cut++
			base := append(append([]int(nil), prompt...), tok.Vocab.AppendEncode(nil, turn)...)
			for _, c := range []struct {
				name string
				obs  []int
			}{{"cut", block[:capTokens]}, {"whole", block}} {
				ctxIDs := append(append([]int(nil), base...), c.obs...)
				for i := 0; i <= samples; i++ {
					k := continuation{Question: q.ID, Dataset: name, Context: c.name, Sample: i, ObsTokens: len(block)}
					if i > 0 {
						k.Seed = int64(len(jobs) + 1)
					}
					jobs = append(jobs, job{k, ctxIDs})
				}
			}
		}
	}
	if cut == 0 {
		return fmt.Errorf("no retrieved block is longer than -cap %d tokens: nothing was cut", capTokens)
	}
	all := make([]continuation, len(jobs))
	p := pool.New().WithContext(ctx).WithCancelOnError().WithFirstError().WithMaxGoroutines(max(r.Policy.Concurrency, 1))
	for i, j := range jobs {
		p.Go(func(ctx context.Context) error {
			sp := policy.Greedy()
			if j.k.Sample > 0 {
				sp = policy.Neutral()
			}
			seed := j.k.Seed
			comp, err := pol.Complete(ctx, policy.CompletionRequest{Model: r.Policy.Model, Prompt: j.prompt,
				MaxTokens: maxTokens, Sampling: sp, Seed: &seed, Stop: format.StopStrings})
			if err != nil {
				return fmt.Errorf("question %s: %w", j.k.Question, err)
			}
			var text []byte
			for _, id := range comp.TokenIDs {
				b, ok := tok.Vocab.TokenBytes(id)
				if !ok {
					return fmt.Errorf("question %s: the server sampled id %d, which policy.tokenizer does not have", j.k.Question, id)
				}
				text = append(text, b...)
			}
			k := j.k
			k.Tokens, k.Text = len(comp.TokenIDs), string(text)
			k.Kind = results.AfterCutKind(k.Text, k.Tokens)
			if k.Kind == results.AfterCutOther {
				k.Opens = opens(k.Text)
			}
			all[i] = k
			return nil
		})
	}
	if err := p.Wait(); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s on %s: %d questions whose block (top %d) is longer than %d tokens; greedy and %d samples at temperature 1 each, up to %d tokens\n",
		r.Policy.Model, pol.URL(), cut, r.Retriever.TopK, capTokens, samples, maxTokens)
	table(w, all)
	if out != "" {
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		var b strings.Builder
		for _, k := range all {
			line, _ := json.Marshal(k)
			b.Write(line)
			b.WriteByte('\n')
		}
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(w, "continuations: %s\n", out)
	}
	return nil
}

// opens says what a continuation that never closed the block starts
// with.
func opens(text string) string {
	t := strings.TrimLeft(text, " \t\r\n")
	for _, tag := range []string{"think", "search", "answer"} {
		if strings.HasPrefix(t, "<"+tag+">") {
			return tag
		}
	}
	return "text"
}

// table prints the shares of each kind per context and sampling.
func table(w io.Writer, all []continuation) {
	cols := []string{results.AfterCutClosed, results.AfterCutWroteOn, results.AfterCutStopped,
		"other:think", "other:search", "other:answer", "other:text"}
	fmt.Fprintf(w, "%-6s %-8s %5s", "block", "sampling", "n")
	for _, c := range cols {
		fmt.Fprintf(w, " %12s", c)
	}
	fmt.Fprintln(w)
	for _, ctxName := range []string{"cut", "whole"} {
		for _, greedy := range []bool{true, false} {
			counts := map[string]int{}
			n := 0
			for _, k := range all {
				if k.Context != ctxName || (k.Sample == 0) != greedy {
					continue
				}
				n++
				key := k.Kind
				if key == results.AfterCutOther {
					key += ":" + k.Opens
				}
				counts[key]++
			}
			mode := "T=1"
			if greedy {
				mode = "greedy"
			}
			fmt.Fprintf(w, "%-6s %-8s %5d", ctxName, mode, n)
			for _, c := range cols {
				share := 0.0
				if n > 0 {
					share = 100 * float64(counts[c]) / float64(n)
				}
				fmt.Fprintf(w, " %11.0f%%", share)
			}
			fmt.Fprintln(w)
		}
	}
}
