package orchestrator

import (
	"slices"

	"github.com/hindsearch/hindsearch/recipes"
)

// RolloutStats describes the rollouts of a finished run's last step.
type RolloutStats struct {
	// Finished holds the seconds, from the step's start, at which each of
	// its trajectories finished, in ascending order.
	Finished []float64
	// Searches and RetrieverCalls count the step's searches and the
	// /retrieve calls they were coalesced into, under the async schedule
	// with batching (retriever.batch_window_ms); both 0 otherwise.
	Searches, RetrieverCalls int64
}

// LastRollouts returns the rollout statistics of the last step of the
// run Run made (zero before Run, or when no step finished).
func (rn *Runner) LastRollouts() RolloutStats {
	var st RolloutStats
	ru := rn.last
	if ru == nil {
		return st
	}
	for _, t := range ru.lastTrajs {
		st.Finished = append(st.Finished, t.Ended().Sub(ru.lastStart).Seconds())
	}
	slices.Sort(st.Finished)
	if ru.r.Rollout.Schedule == recipes.ScheduleAsync {
		st.Searches, st.RetrieverCalls = ru.rollouts.SearchStats()
	}
	return st
}
