package rollout

import (
	"slices"

	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/recipes"
)

// OffendingTurns returns the indices into t.Turns of the turns that
// commit cause (recipes.Abnormal*), in order; none when t does not:
//   - invalid_action: each turn with neither a search nor an answer;
//   - truncation: each turn cut at its token cap or the context budget,
//     and the last turn when the trajectory ended at the context budget
//     or the turn limit without an answer (an <information> block cut at
//     rollout.max_obs_tokens is counted in the health, not here: the
//     environment cut it, as SearchAgent-Zero counts its tool-response
//     cuts without masking them);
//   - retrieval_error: each turn whose search the retriever failed;
//   - repeated_query: each turn repeating an earlier search;
//   - no_answer: the last turn of a trajectory with no <answer> (Score
//     must have run).
func (t *Trajectory) OffendingTurns(cause string) []int {
	var out []int
	last := len(t.Turns) - 1
	for i, tr := range t.Turns {
		var hit bool
		switch cause {
		case recipes.AbnormalInvalidAction:
			hit = tr.Action == format.ActionNone
		case recipes.AbnormalTruncation:
			hit = tr.Cut != "" || (i == last && (t.Finish == "context" || t.Finish == "max_turns"))
		case recipes.AbnormalRetrievalError:
			hit = tr.RetrievalError != ""
		case recipes.AbnormalRepeatedQuery:
			hit = tr.Repeated
		case recipes.AbnormalNoAnswer:
			hit = i == last && !t.Answered
		}
		if hit {
			out = append(out, i)
		}
	}
	return out
}

// Abnormal reports whether t commits any of causes.
func (t *Trajectory) Abnormal(causes []string) bool {
	return slices.ContainsFunc(causes, func(c string) bool { return len(t.OffendingTurns(c)) > 0 })
}

// PenaltyMask marks the response tokens of t's turns that commit any of
// causes (OffendingTurns): the policy tokens of those turns, nothing else;
// nil when no turn does. turns counts the turns marked.
func (t *Trajectory) PenaltyMask(causes []string) (mask []bool, turns int) {
	marked := map[int]bool{}
	for _, c := range causes {
		for _, i := range t.OffendingTurns(c) {
			marked[i] = true
		}
	}
	if len(marked) == 0 {
		return nil, 0
	}
	mask = make([]bool, len(t.Tokens))
	for i := range marked {
		tr := t.Turns[i]
		for j := tr.From; j < tr.To && j < len(mask); j++ {
			mask[j] = j < len(t.Policy) && t.Policy[j]
		}
	}
	return mask, len(marked)
}
