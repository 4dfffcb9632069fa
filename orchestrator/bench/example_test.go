package bench_test

import (
	"fmt"

	"github.com/hindsearch/hindsearch/orchestrator/bench"
)

// A Bleve variant of the retrieval benchmark's --engines, read into the
// engine's options.
func ExampleParseBleveEngine() {
	o, err := bench.ParseBleveEngine("bleve-shards2-batch10k-terms")
	fmt.Printf("%+v %v\n", o, err)
	_, err = bench.ParseBleveEngine("bleve-fast")
	fmt.Println(err)
	// Output:
	// {Shards:2 BatchSize:10000 NoMerge:false Terms:true} <nil>
	// --engines: "bleve-fast": unknown option "fast" (want shardsN, batchN, unmerged or terms)
}
