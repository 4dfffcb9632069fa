package trainer_test

import (
	"fmt"

	"github.com/hindsearch/hindsearch/clients/trainer"
)

// Model ids as SkyRL and the hosted service make them pass; anything that
// could leave its path segment does not.
func ExampleValidModelID() {
	for _, id := range []string{"model_3f2a9c1b", "4a1939e6-04be-5a77-9e4e-910ccff9f27e:train:0", "..", "a/b", ""} {
		fmt.Printf("%q %v\n", id, trainer.ValidModelID(id))
	}
	// Output:
	// "model_3f2a9c1b" true
	// "4a1939e6-04be-5a77-9e4e-910ccff9f27e:train:0" true
	// ".." false
	// "a/b" false
	// "" false
}
