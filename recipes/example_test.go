package recipes_test

import (
	"fmt"

	"github.com/hindsearch/hindsearch/recipes"
)

func ExampleRecipe_Switches() {
	r := recipes.Defaults()
	fmt.Println(r.Switches())

	r.Hindsight.GoldAnswer = false
	r.Hindsight.Loss = recipes.HindsightLossReverseKL
	r.Hindsight.Coef = 0.5
	fmt.Println(r.Switches())

	r.Hindsight.Enabled = false
	fmt.Println(r.Switches())
	// Output:
	// hindsight=on gold=on loss=clamp broadcast=search teacher=self coef=1 clamp=1 judge=Qwen/Qwen2.5-7B-Instruct prompt=default
	// hindsight=on gold=off loss=reverse_kl broadcast=search teacher=self coef=0.5 clamp=1 judge=Qwen/Qwen2.5-7B-Instruct prompt=default
	// hindsight=off
}

// eval.subset names a way of choosing questions, or a manifest file.
func ExampleEval_SubsetManifest() {
	fmt.Printf("%q\n", recipes.Eval{Subset: recipes.SubsetRand1000}.SubsetManifest())
	fmt.Printf("%q\n", recipes.Eval{Subset: "/runs/a/eval_subset.json"}.SubsetManifest())
	// Output:
	// ""
	// "/runs/a/eval_subset.json"
}
