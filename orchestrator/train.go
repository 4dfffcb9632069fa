package orchestrator

import (
	"context"
	"fmt"
	"strings"

	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/recipes"
)

// sender takes a step's datums a group at a time, as the groups finish
// (collect.go). With the step streamed it trains them as they come: whole
// mini-batches as soon as each is complete (trainer.mini_batch_size,
// sendReady), or, when the recipe's loss aggregation is the backend's own
// and the step is one mini-batch, every trainer.chunk_size datums at once;
// otherwise it only keeps them, and train sends them.
type sender struct {
	groups chan arrival
	done   chan struct{}
	err    error // the first training failure (streamed)
}

// startSender starts c's sender, with room for n groups; a streamed
// training failure cancels the collection (cancel).
func (ru *run) startSender(ctx context.Context, c *collected, n int, cancel context.CancelFunc) *sender {
	s := &sender{groups: make(chan arrival, n), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for g := range s.groups {
			if s.err != nil {
				continue
			}
			if err := ru.arrive(ctx, c, g.group, g.datums); err != nil {
				s.err = err
				cancel()
			}
		}
		if s.err == nil && c.streamd && c.chunked {
			s.err = ru.flushChunk(ctx, c)
		}
	}()
	return s
}

// close ends the groups, waits for the sender and returns its training
// failure.
func (s *sender) close() error {
	close(s.groups)
	<-s.done
	return s.err
}

// arrival is a finished group's datums (none when no trajectory of it had
// a policy token).
type arrival struct {
	group  int // the step-relative index of the group
	datums []keyedDatum
}

// position is d's place in the step's canonical order (group, then
// sample).
func (c *collected) position(d keyedDatum, groupSize int) int {
	return (d.group-c.firstGroup)*groupSize + d.sample
}

// arrive takes finished group g's datums and, on a streamed step, trains
// what they complete.
func (ru *run) arrive(ctx context.Context, c *collected, g int, ds []keyedDatum) error {
	c.built = append(c.built, ds...)
	c.groupDone[g] = true
	if !c.streamd {
		return nil
	}
	if c.chunked {
		for _, d := range ds {
			c.sent = append(c.sent, d)
			c.chunk = append(c.chunk, d.datum)
			if len(c.chunk) >= ru.r.Trainer.ChunkSize {
				if err := ru.flushChunk(ctx, c); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return ru.sendReady(ctx, c)
}

// flushChunk sends the chunk a chunked step has gathered.
func (ru *run) flushChunk(ctx context.Context, c *collected) error {
	if len(c.chunk) == 0 {
		return nil
	}
	err := ru.forwardBackward(ctx, c, c.chunk)
	c.chunk = nil
	return err
}

// sendReady trains, in order, every mini-batch of c not yet trained whose
// groups have all finished: mini-batch k is the trajectories at canonical
// positions [k*M, (k+1)*M) of the step (group, then sample; M is
// trainer.mini_batch_size), whatever order their groups finished in. Its
// datums' advantages are scaled for the loss aggregation (lossScale, over
// the mini-batch's datums and policy tokens), sent to forward_backward in
// canonical order, trainer.chunk_size at a time, and followed by
// optim_step at the step's scheduled learning rate. Under
// hindsight.term_agg search-mean each datum's OPD term is added after the
// scaling (termScale), over the mini-batch's term tokens.
func (ru *run) sendReady(ctx context.Context, c *collected) error {
	G := ru.r.Train.GroupSize
	total := len(c.groups) * G
	M := ru.r.MiniBatch()
	for c.nextMB*M < total {
		lo, hi := c.nextMB*M, min((c.nextMB+1)*M, total)
		for g := lo / G; g <= (hi-1)/G; g++ {
			if !c.groupDone[g] {
				return nil
			}
		}
		var mb []keyedDatum
		tokens, termTokens := 0, 0
		for _, d := range c.built {
			if p := c.position(d, G); p >= lo && p < hi {
				mb = append(mb, d)
				tokens += d.tokens
				termTokens += d.termTokens
			}
		}
		sortKeyed(mb)
		for i := range mb {
			sd, err := scaleDatum(mb[i].datum, lossScale(ru.r.Trainer.LossAgg, ru.backend, mb[i].tokens, len(mb), tokens))
			if err == nil && mb[i].opd != nil {
				sd, err = addTerm(sd, mb[i].opd, termScale(ru.r.Hindsight.Coef, ru.backend, mb[i].tokens, len(mb), termTokens))
			}
			if err != nil {
				return err
			}
			mb[i].datum = sd
		}
		if termTokens > 0 {
			c.termScaleSum += float64(tokens) / float64(termTokens)
			c.termScaleN++
		}
		// PPO's clip acts on the term with the rest of the advantage: where
		// the ratio has moved off 1 (a mini-batch after the step's first,
		// or any under off-policy sampling) it may zero its gradient.
		if ru.r.Trainer.Loss == recipes.TrainerLossPPO && (c.nextMB > 0 || ru.r.Train.MaxOffPolicySteps > 0) {
			for _, d := range mb {
				c.opdClippable += d.opdTokens
			}
		}
		c.sent = append(c.sent, mb...)
		for lo := 0; lo < len(mb); lo += ru.r.Trainer.ChunkSize {
			hi := min(lo+ru.r.Trainer.ChunkSize, len(mb))
			chunk := make([]trainer.Datum, 0, hi-lo)
			for _, d := range mb[lo:hi] {
				chunk = append(chunk, d.datum)
			}
			if err := ru.forwardBackward(ctx, c, chunk); err != nil {
				return err
			}
		}
		c.nextMB++
		if len(mb) > 0 {
			if err := ru.optimStep(ctx, c); err != nil {
				return err
			}
		}
	}
	return nil
}

// train runs step 6 of DESIGN §2 for a collected step: every mini-batch
// not yet trained (sendReady), or on a chunked streamed step (the whole
// step one mini-batch in the backend's own aggregation) the step's one
// optim_step.
func (ru *run) train(ctx context.Context, c *collected) error {
	if c.streamd && c.chunked {
		return ru.optimStep(ctx, c)
	}
	// Every group has finished (collect returned): every mini-batch is
	// complete.
	if err := ru.sendReady(ctx, c); err != nil {
		return err
	}
	if left := ru.r.OptimSteps() - c.nextMB; left > 0 {
		return fmt.Errorf("train: %d mini-batches of step %d never complete (a group did not finish)", left, c.step)
	}
	return nil
}

// optimStep steps the optimiser with the trainer.* Adam settings at the
// step's scheduled learning rate (learningRate) and keeps its metrics.
func (ru *run) optimStep(ctx context.Context, c *collected) error {
	r := ru.r
	done := c.clock.Start("train")
	om, err := ru.trainer.OptimStep(ctx, ru.modelID, trainer.AdamParams{LearningRate: learningRate(r, c.step),
		Beta1: r.Trainer.Beta1, Beta2: r.Trainer.Beta2, Eps: r.Trainer.Eps, WeightDecay: r.Trainer.WeightDecay})
	done()
	if err != nil {
		return fmt.Errorf("optim_step %d: %w", len(c.om)+1, err)
	}
	c.om = append(c.om, om)
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
// no suffix the sum. optim_step's metrics are the mean over the step's
// optim_steps (one per mini-batch).
func mergeMetrics(fb []map[string]float64, om []map[string]float64) map[string]float64 {
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
	for _, m := range om {
		for k, v := range m {
			out["optim_step/"+k] += v / float64(len(om))
		}
	}
	return out
}
