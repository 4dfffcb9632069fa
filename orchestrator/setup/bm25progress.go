package setup

import (
	"fmt"
	"io"

	"github.com/hindsearch/hindsearch/clients/retriever/bm25"
	"github.com/hindsearch/hindsearch/orchestrator/progress"
)

// BM25Progress returns a progress function for bm25.Open that says, on
// the first call, that the index of corpus is being built into dir (on
// log), then shows each stage (reading the corpus, merging the runs) as a
// task of rep in MiB; and a function that ends the last task, to call
// when Open returns. built reports whether a build happened.
func BM25Progress(rep *progress.Reporter, log io.Writer, corpus, dir string) (fn func(bm25.Progress), done func(), built func() bool) {
	var task *progress.Task
	stage := ""
	started := false
	var base int64 // where a resumed stage started
	fn = func(p bm25.Progress) {
		if !started {
			fmt.Fprintf(log, "building the BM25 index of %s (once; cached in %s; resumed if killed)\n", corpus, dir)
			started = true
		}
		if p.Stage != stage {
			task.Done()
			name := "BM25 index: reading the corpus"
			if p.Stage == "merge" {
				name = "BM25 index: merging"
			}
			// A resumed build starts part way: the task counts from
			// there, so that its rate and time left are this run's.
			base = p.From
			if base > 0 {
				name += fmt.Sprintf(" (resumed at %d MiB)", base>>20)
			}
			task, stage = rep.Start(name, int((p.Total-base)>>20), "MiB"), p.Stage
		}
		task.Add(int((p.Done-base)>>20) - int(task.Count()))
	}
	return fn, func() { task.Done() }, func() bool { return started }
}
