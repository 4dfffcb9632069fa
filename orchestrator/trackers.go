package orchestrator

import (
	"fmt"
	"time"

	"github.com/hindsearch/hindsearch/orchestrator/tracking"
)

// startTracking starts the run's trackers (tracking.*) with the recipe as
// saved (y); a resumed run continues its trackers' runs after its resume
// point.
func (ru *run) startTracking(y []byte) error {
	cfg := tracking.Config{Recipe: ru.r, RunDir: ru.dir.Path, RecipeYAML: y, ResumeAfter: -1, Simulated: ru.sim,
		MLflow: ru.Deps.MLflow, Out: ru.Out, OnFail: ru.Metrics.TrackerFailed, Start: time.Now()}
	if st := ru.resumed; st != nil {
		cfg.ResumeAfter, cfg.IDs = st.Step, st.Tracking
	}
	hub, err := tracking.New(cfg)
	if err != nil {
		return fmt.Errorf("tracking: %w", err)
	}
	ru.track = hub
	return nil
}

// closeTracking ends the trackers' runs (ok: the run finished) after
// giving them the run's files and its results table, waits up to
// tracking.flush_seconds for them, and prints where each run is.
func (ru *run) closeTracking(ok bool) {
	if !ru.track.Enabled() {
		return
	}
	evals, _ := ru.dir.ReadEval() // none read: no table, the other files still go
	ru.track.Files(tracking.FinalFiles(ru.dir.Path, evals, ru.caption()))
	for _, line := range ru.track.Close(ok, time.Duration(ru.r.Tracking.FlushSeconds*float64(time.Second))) {
		fmt.Fprintln(ru.Out, line)
	}
}
