package fleet_test

import (
	"fmt"

	"github.com/hindsearch/hindsearch/orchestrator/fleet"
)

// SkyRL answers save_weights_for_sampler with tinker://<model_id>/<name>,
// the hosted service with tinker://<run>/sampler_weights/<name>; both name
// the archive SkyRL writes under its checkpoints base. Other shapes are
// refused.
func ExampleArchivePath() {
	for _, p := range []string{
		"tinker://model_3f2a9c1b/hs-step0001",
		"tinker://model_3f2a9c1b/sampler_weights/hs-step0001",
		"tinker://model_3f2a9c1b/weights/hs-step0001",
		"tinker://model_3f2a9c1b/../hs-step0001",
	} {
		archive, err := fleet.ArchivePath("/ckpt", p)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Println(archive)
	}
	// Output:
	// /ckpt/model_3f2a9c1b/sampler_weights/hs-step0001.tar.gz
	// /ckpt/model_3f2a9c1b/sampler_weights/hs-step0001.tar.gz
	// error: sampler path "tinker://model_3f2a9c1b/weights/hs-step0001" is a training state (weights/), not sampler weights
	// error: sampler path "tinker://model_3f2a9c1b/../hs-step0001": want tinker://<model_id>/<name> or tinker://<model_id>/sampler_weights/<name>
}
