package orchestrator

import (
	"context"
	"fmt"
	"strings"

	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/recipes"
)

// sender takes a step's datums as their groups finish (collect.go). With
// the step streamed it sends them to forward_backward in chunks of
// trainer.chunk_size as they come; otherwise it only keeps them, and train
// sends them.
type sender struct {
	datums chan keyedDatum
	done   chan struct{}
	err    error // the first forward_backward failure (streamed)
}

// startSender starts c's sender, with room for n datums; a streamed
// forward_backward failure cancels the collection (cancel).
func (ru *run) startSender(ctx context.Context, c *collected, n int, cancel context.CancelFunc) *sender {
	r := ru.r
	s := &sender{datums: make(chan keyedDatum, n), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if !c.streamd {
			for d := range s.datums {
				c.sent = append(c.sent, d)
			}
			return
		}
		var chunk []trainer.Datum
		flush := func() {
			if len(chunk) == 0 || s.err != nil {
				return
			}
			if err := ru.forwardBackward(ctx, c, chunk); err != nil {
				s.err = err
				cancel()
				return
			}
			chunk = nil
		}
		for d := range s.datums {
			c.sent = append(c.sent, d)
			chunk = append(chunk, d.datum)
			if len(chunk) >= r.Trainer.ChunkSize {
				flush()
			}
		}
		flush()
	}()
	return s
}

// close ends the datums, waits for the sender and returns its
// forward_backward failure.
func (s *sender) close() error {
	close(s.datums)
	<-s.done
	return s.err
}

// train runs step 6 of DESIGN §2 for a collected step: the datums not yet
// sent go to forward_backward in canonical order (group, then sample), in
// chunks of trainer.chunk_size; then optim_step with the trainer.* Adam
// settings.
func (ru *run) train(ctx context.Context, c *collected) error {
	r := ru.r
	if !c.streamd {
		ordered := append([]keyedDatum(nil), c.sent...)
		sortKeyed(ordered)
		for lo := 0; lo < len(ordered); lo += r.Trainer.ChunkSize {
			hi := min(lo+r.Trainer.ChunkSize, len(ordered))
			chunk := make([]trainer.Datum, 0, hi-lo)
			for _, d := range ordered[lo:hi] {
				chunk = append(chunk, d.datum)
			}
			if err := ru.forwardBackward(ctx, c, chunk); err != nil {
				return err
			}
		}
	}
	done := c.clock.Start("train")
	om, err := ru.trainer.OptimStep(ctx, ru.modelID, trainer.AdamParams{LearningRate: r.Trainer.LearningRate,
		Beta1: r.Trainer.Beta1, Beta2: r.Trainer.Beta2, Eps: r.Trainer.Eps, WeightDecay: r.Trainer.WeightDecay})
	done()
	if err != nil {
		return fmt.Errorf("optim_step: %w", err)
	}
	c.om = om
	return nil
}

// forwardBackward sends one chunk of c's datums to forward_backward and
// keeps its metrics.
func (ru *run) forwardBackward(ctx context.Context, c *collected, chunk []trainer.Datum) error {
	done := c.clock.Start("train")
	res, err := ru.trainer.ForwardBackward(ctx, ru.modelID, chunk, ru.r.Trainer.Loss, lossConfig(ru.r))
	done()
	if err != nil {
		return fmt.Errorf("forward_backward: %w", err)
	}
	c.fb = append(c.fb, res.Metrics)
	return nil
}

// lossConfig is forward_backward's loss_fn_config: PPO's clip thresholds
// (trainer.clip_low, trainer.clip_high), none for the other losses.
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
