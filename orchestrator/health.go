package orchestrator

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/orchestrator/rollout"
	"github.com/hindsearch/hindsearch/results"
)

// stepHealth measures the search agent's health over all of a step's
// trajectories (results.Health says what each figure is).
func stepHealth(all []*rollout.Trajectory) *results.Health {
	h := &results.Health{Truncated: map[string]float64{}, GoldRetrievedRate: new(float64)}
	for _, c := range results.TruncationCauses {
		h.Truncated[c] = 0
	}
	if len(all) == 0 {
		return h
	}
	var turns, invalid, searches, repeated, failed, policyTokens, think, goldRetrieved int
	var surprisal float64
	var afterCut []string
	for _, t := range all {
		if t.Answered {
			h.AnswerRate++
		}
		causes := map[string]bool{}
		if slices.ContainsFunc(t.Turns, func(tr rollout.Turn) bool { return tr.GoldRetrieved }) {
			goldRetrieved++
		}
		for j, tr := range t.Turns {
			turns++
			think += tr.ThinkTokens
			if j > 0 && t.Turns[j-1].ObsCut {
				afterCut = append(afterCut, results.AfterCutKind(tr.Text, tr.To-tr.From))
			}
			switch tr.Action {
			case format.ActionNone:
				invalid++
			case format.ActionSearch:
				searches++
				if tr.Repeated {
					repeated++
				}
				if tr.RetrievalError != "" {
					failed++
				}
			}
			switch tr.Cut {
			case rollout.CutTurnTokens:
				causes[results.TruncTurnTokens] = true
			case rollout.CutContext:
				causes[results.TruncContext] = true
			}
			if tr.ObsCut {
				causes[results.TruncObservation] = true
			}
		}
		switch t.Finish {
		case "context":
			causes[results.TruncContext] = true
		case "max_turns":
			causes[results.TruncTurnLimit] = true
		}
		for c := range causes {
			h.Truncated[c]++
		}
		if len(causes) > 0 {
			h.TruncatedRate++
		}
		for j, p := range t.Policy {
			if p {
				policyTokens++
				surprisal -= t.Logprobs[j]
			}
		}
	}
	n := float64(len(all))
	h.AfterCut = results.NewAfterCut(afterCut)
	h.SearchesPerTrajectory = float64(searches) / n
	h.AnswerRate /= n
	*h.GoldRetrievedRate = float64(goldRetrieved) / n
	h.TruncatedRate /= n
	for c := range h.Truncated {
		h.Truncated[c] /= n
	}
	h.ResponseTokens = float64(policyTokens) / n
	h.ThinkTokens = float64(think) / n
	if turns > 0 {
		h.InvalidActionRate = float64(invalid) / float64(turns)
	}
	if searches > 0 {
		h.RepeatedQueryRate = float64(repeated) / float64(searches)
		h.RetrievalErrorRate = float64(failed) / float64(searches)
	}
	if policyTokens > 0 {
		h.SampledEntropy = surprisal / float64(policyTokens)
	}
	return h
}

// retrievalFailures counts a step's searches and those the retriever
// failed, with the first failure's text.
func retrievalFailures(all []*rollout.Trajectory) (searches, failed int, first string) {
	for _, t := range all {
		for _, tr := range t.Turns {
			if tr.Action != format.ActionSearch {
				continue
			}
			searches++
			if tr.RetrievalError != "" {
				failed++
				if first == "" {
					first = tr.RetrievalError
				}
			}
		}
	}
	return searches, failed, first
}

// checkRetrieval fails a step whose failed searches exceed
// retriever.max_error_rate of its searches.
func (ru *run) checkRetrieval(all []*rollout.Trajectory) error {
	searches, failed, first := retrievalFailures(all)
	if searches == 0 || failed == 0 || float64(failed) <= ru.r.Retriever.MaxErrorRate*float64(searches) {
		return nil
	}
	return fmt.Errorf("the retriever failed %d of %d searches (%.0f%%, above retriever.max_error_rate %g); the first: %s; the step is not recorded: fix the retriever and --resume",
		failed, searches, 100*float64(failed)/float64(searches), ru.r.Retriever.MaxErrorRate, first)
}

// alarmWords says one collapse alarm in doctor's manner: what fell, by
// how much, since which step.
func alarmWords(a results.HealthAlarm, window int) string {
	steps := func(from, to int) string {
		if from == to {
			return fmt.Sprintf("step %d", from)
		}
		return fmt.Sprintf("mean of steps %d-%d", from, to)
	}
	return fmt.Sprintf("%s fell %.0f%% since step %d: %.4g (%s) from its peak %.4g (%s); health.window %d",
		strings.ReplaceAll(a.Metric, "_", " "), 100*a.Fall, a.PeakTo, a.Now, steps(a.From, a.To), a.Peak, steps(a.PeakFrom, a.PeakTo), window)
}

// watchHealth sets rec's collapse alarms from the run's health so far and
// warns of each alarm that was not firing at the step before.
func (ru *run) watchHealth(rec *results.StepRecord) {
	if rec.Health == nil {
		return
	}
	before := map[string]bool{}
	if n := len(ru.healthPast); n > 0 {
		for _, a := range ru.healthPast[n-1].Health.Alarms {
			before[a.Metric] = true
		}
	}
	ru.healthPast = append(ru.healthPast, results.HealthPoint{Step: rec.Step, Health: rec.Health})
	hp := ru.r.Health
	rec.Health.Alarms = results.Alarms(ru.healthPast, hp.Window, hp.Drop, hp.Watch)
	for _, a := range rec.Health.Alarms {
		if !before[a.Metric] {
			fmt.Fprintf(ru.Out, "warning: step %d: collapse alarm: %s\n", rec.Step, alarmWords(a, hp.Window))
		}
	}
}
