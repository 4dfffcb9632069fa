package progress_test

import (
	"fmt"
	"os"

	"github.com/hindsearch/hindsearch/orchestrator/progress"
)

// A command picks the mode from its --progress flag and whether its output
// is a terminal, reports each phase as a task, and prints its own lines
// through the reporter's Writer. In Lines mode a task shorter than the
// interval prints nothing of its own.
func Example() {
	mode, err := progress.ParseMode("auto", false) // not a terminal: Lines
	if err != nil {
		panic(err)
	}
	rep := progress.New(os.Stdout, mode, 0)
	defer rep.Close()
	task := rep.Start("rollout step 1", 4, "trajectories")
	task.Add(4)
	task.Done()
	fmt.Fprintln(rep.Writer(), "step 1/1  reward(EM) 0.250")
	// Output: step 1/1  reward(EM) 0.250
}
