package results_test

import (
	"fmt"
	"os"

	"github.com/hindsearch/hindsearch/results"
)

func ExampleSummarise() {
	recs := []results.EvalRecord{
		{Step: 100, Strategy: "greedy", Dataset: "nq", N: 3610, EM: 0.40, F1: 0.48},
		{Step: 100, Strategy: "greedy", Dataset: "hotpotqa", N: 7405, EM: 0.30, F1: 0.40},
		{Step: 0, Strategy: "greedy", Dataset: "nq", N: 3610, EM: 0.10, F1: 0.15},
	}
	for _, row := range results.Summarise(recs) {
		fmt.Printf("step %d %s: avg EM %.3f over %d datasets\n", row.Step, row.Strategy, row.AvgEM, len(row.EM))
	}
	// Output:
	// step 0 greedy: avg EM 0.100 over 1 datasets
	// step 100 greedy: avg EM 0.350 over 2 datasets
}

func ExampleEvalTable() {
	recs := []results.EvalRecord{
		{Step: 100, Strategy: "greedy", Dataset: "nq", EM: 0.397},
		{Step: 100, Strategy: "greedy", Dataset: "2wikimultihopqa", EM: 0.310},
		{Step: 100, Strategy: "greedy", Dataset: "mydata", EM: 0.5},
	}
	if err := results.EvalTable(os.Stdout, recs, "EM (%) at step 100."); err != nil {
		fmt.Println(err)
	}
	// Output:
	// +------+----------+------+-------+--------+------+
	// | step | strategy |  NQ  | 2Wiki | mydata | avg  |
	// +------+----------+------+-------+--------+------+
	// |  100 | greedy   | 39.7 |  31.0 |   50.0 | 40.2 |
	// +------+----------+------+-------+--------+------+
	// EM (%) at step 100.
}

func ExampleBootstrapCI() {
	// Exact match of 200 questions, 70 of them right.
	em := make([]float64, 200)
	for i := range 70 {
		em[i] = 1
	}
	lo, hi := results.BootstrapCI(em, 1000, 1)
	fmt.Printf("EM 35.0%%, 95%% CI [%.1f, %.1f]\n", 100*lo, 100*hi)
	lo2, hi2 := results.BootstrapCI(em, 1000, 1)
	fmt.Println("same seed, same interval:", lo == lo2 && hi == hi2)
	// Output:
	// EM 35.0%, 95% CI [28.5, 41.0]
	// same seed, same interval: true
}

func ExamplePairedBootstrapDiff() {
	// Two seeds of four questions each; index i is the same question for
	// the variant and the base.
	runs := []results.PairedRun{
		{Variant: []float64{1, 1, 0, 1}, Base: []float64{0, 1, 0, 0}},
		{Variant: []float64{1, 0, 1, 1}, Base: []float64{1, 0, 0, 0}},
	}
	diff, lo, hi, err := results.PairedBootstrapDiff(runs, 0, results.StudyBootstrapSeed)
	if err != nil {
		panic(err)
	}
	fmt.Printf("diff %.2f, 95%% CI [%.2f, %.2f]\n", diff, lo, hi)
	// Output:
	// diff 0.50, 95% CI [0.12, 0.88]
}
