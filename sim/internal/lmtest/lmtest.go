// Package lmtest gives the tests of the simulated servers (sim and
// sim/trainer) Search-R1 rollouts of the simulated policy (sim/lm) against
// a retriever. lm's own tests keep a copy (lm/helpers_test.go): they cannot
// import a package that imports lm. Keep the two alike.
package lmtest

import (
	"math/rand/v2"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/sim/internal/simtest"
	"github.com/hindsearch/hindsearch/sim/lm"
)

// PromptText is the chat-templated Search-R1 prompt of a question, with an
// optional hint, ending with the assistant header.
func PromptText(question, hint string) string {
	return lm.ChatTemplate([]lm.ChatMessage{{Role: "user", Content: format.UserPrompt(question, hint)}}, true)
}

// TrainSampling is Search-R1's training sampling: temperature 1, no top-p
// or top-k, a turn ending at </search> or </answer>.
func TrainSampling() lm.Sampling {
	return lm.Sampling{Temperature: 1, TopP: 1, TopK: -1, MaxTokens: 500, Stop: format.StopStrings, IncludeStopStr: true}
}

// Trajectory is one multi-turn rollout of the policy against a retriever.
type Trajectory struct {
	// IDs are the prompt's and the response's token ids.
	IDs []int
	// Policy[i] says IDs[i] was sampled by the policy.
	Policy []bool
	// Logprobs[i] is the sampling logprob of IDs[i] (policy tokens only).
	Logprobs []float64
	// PromptLen is the number of prompt ids.
	PromptLen int
	// Response is the text after the prompt.
	Response string
	// Queries are the searches made, in order.
	Queries []string
	// Answer is the answer given, when Answered.
	Answer   string
	Answered bool
}

// PolicyPositions returns the indices of the policy's tokens.
func (tr Trajectory) PolicyPositions() []int {
	var out []int
	for i, p := range tr.Policy {
		if p {
			out = append(out, i)
		}
	}
	return out
}

// Rollout runs the agent loop of Search-R1 with m under params: sample a
// turn, append the information block for a search (docs of the query) or
// the invalid-action text, until an answer or maxTurns turns.
func Rollout(m *lm.Model, params lm.Params, question, hint string, sp lm.Sampling, rng *rand.Rand, maxTurns int, docs func(string) []string) Trajectory {
	tk := m.Tokenizer()
	var tr Trajectory
	tr.IDs = tk.Encode(PromptText(question, hint))
	tr.PromptLen = len(tr.IDs)
	tr.Policy = make([]bool, len(tr.IDs))
	tr.Logprobs = make([]float64, len(tr.IDs))
	env := func(text string) {
		ids := tk.Encode(text)
		tr.IDs = append(tr.IDs, ids...)
		tr.Policy = append(tr.Policy, make([]bool, len(ids))...)
		tr.Logprobs = append(tr.Logprobs, make([]float64, len(ids))...)
		tr.Response += text
	}
	for turn := 0; turn < maxTurns; turn++ {
		g := m.Generate(params, tr.IDs, sp, rng)
		tr.IDs = append(tr.IDs, g.IDs...)
		tr.Logprobs = append(tr.Logprobs, g.Logprobs...)
		for range g.IDs {
			tr.Policy = append(tr.Policy, true)
		}
		tr.Response += g.Text
		kind, content := format.ParseAction(g.Text)
		switch kind {
		case format.ActionAnswer:
			tr.Answer, tr.Answered = content, true
			return tr
		case format.ActionSearch:
			tr.Queries = append(tr.Queries, content)
			if turn+1 < maxTurns {
				env(format.InfoBlock(docs(content)))
			}
		default:
			if turn+1 < maxTurns {
				env(lm.InvalidActionText)
			}
		}
	}
	return tr
}

// BM25Docs retrieves the top 3 passages of a query with the real index.
func BM25Docs(t testing.TB) func(string) []string {
	return func(q string) []string { return simtest.Search(t, []string{q}, 3)[0] }
}

// CreateModel creates a model of base (LoRA rank 8) on a simulated
// trainer through c's session and returns its id.
func CreateModel(c simtest.Client, session string, seq int, base string) string {
	c.T.Helper()
	res := c.Call("/api/v1/create_model", map[string]any{"session_id": session, "model_seq_id": seq, "base_model": base,
		"lora_config": map[string]any{"rank": 8}, "type": "create_model"})
	return res["model_id"].(string)
}

// Tensor is a Tinker tensor of data with dtype.
func Tensor(data []float64, dtype string) map[string]any {
	return map[string]any{"data": data, "dtype": dtype, "shape": []int{len(data)}}
}

// Datum builds the Tinker datum of a trajectory: position i predicts token
// i+1; the policy's tokens get weight 1, advantage adv and their sampling
// logprob plus lpShift; the rest get zeros.
func Datum(tr Trajectory, adv, lpShift float64) map[string]any {
	n := len(tr.IDs) - 1
	target, weights, lps, advs := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	for i := 0; i < n; i++ {
		target[i] = float64(tr.IDs[i+1])
		if tr.Policy[i+1] {
			weights[i], advs[i] = 1, adv
			lps[i] = float64(float32(tr.Logprobs[i+1] + lpShift))
		}
	}
	return map[string]any{
		"model_input": map[string]any{"chunks": []map[string]any{{"type": "encoded_text", "tokens": tr.IDs[:n]}}},
		"loss_fn_inputs": map[string]any{"target_tokens": Tensor(target, "int64"), "weights": Tensor(weights, "float32"),
			"logprobs": Tensor(lps, "float32"), "advantages": Tensor(advs, "float32")},
	}
}
