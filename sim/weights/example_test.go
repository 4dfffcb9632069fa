package weights

import (
	"fmt"

	"github.com/hindsearch/hindsearch/sim/lm"
)

// A safetensors file written by the simulated trainer holds its parameters
// at float32 precision.
func ExampleEncodeSafetensors() {
	p := lm.InitialParams()
	p[lm.PAnswerTypeMatch] = 0.1
	b, _ := EncodeSafetensors(p)
	q, err := DecodeSafetensors(b)
	fmt.Println(err, q[lm.PSearchBias], q[lm.PAnswerTypeMatch] == float64(float32(0.1)))
	// Output:
	// <nil> -1 true
}
