package orchestrator

import (
	"strings"

	"github.com/hindsearch/hindsearch/recipes"
)

func lossConfig(r *recipes.Recipe) map[string]float64 {
	if r.Trainer.Loss != recipes.TrainerLossPPO {
		return nil
	}
	return map[string]float64{"clip_low_threshold": r.Trainer.ClipLow, "clip_high_threshold": r.Trainer.ClipHigh}
}

// mergeMetrics merges the forward_backward metrics of a step's chunks by
// the suffix of their names, SkyRL's reduction marks
// (skyrl_train_backend.py): ":mean" the mean over the chunks that report
// it, ":max" and ":min" the extreme, ":last" the last chunk's, ":sum" and
// no suffix the sum. optim_step's metrics are taken as they are.
func mergeMetrics(fb []map[string]float64, om map[string]float64) map[string]float64 {
	out := map[string]float64{}
	seen := map[string]int{}
	for _, m := range fb {
		for k, v := range m {
			key := "forward_backward/" + k
			n := seen[key]
			seen[key]++
			switch {
			case n == 0:
				out[key] = v
			case strings.HasSuffix(k, ":mean"):
				out[key] += (v - out[key]) / float64(n+1)
			case strings.HasSuffix(k, ":max"):
				out[key] = max(out[key], v)
			case strings.HasSuffix(k, ":min"):
				out[key] = min(out[key], v)
			case strings.HasSuffix(k, ":last"):
				out[key] = v
			default:
				out[key] += v
			}
		}
	}
	for k, v := range om {
		out["optim_step/"+k] = v
	}
	return out
}
