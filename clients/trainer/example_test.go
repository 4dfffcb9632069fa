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

// A checkpoint path splits into the model id, the kind and the name, as
// SkyRL and the hosted service write them; the id and the name are then
// checked before either reaches a file path.
func ExampleSplitCheckpointPath() {
	for _, p := range []string{
		"tinker://model_3f2a9c1b/hs-step0001",
		"tinker://model_3f2a9c1b/weights/hs-state0050",
		"tinker://../sampler_weights/x",
	} {
		id, kind, name, err := trainer.SplitCheckpointPath(p)
		if err == nil {
			err = trainer.CheckCheckpointRef(p, id, name)
		}
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Println(id, kind, name)
	}
	// Output:
	// model_3f2a9c1b sampler_weights hs-step0001
	// model_3f2a9c1b weights hs-state0050
	// error: sampler path "tinker://../sampler_weights/x": model id ".." must be letters, digits, '_', '-', '.' or ':' (and not . or ..)
}
