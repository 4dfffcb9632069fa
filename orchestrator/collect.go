package orchestrator

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/orchestrator/dataset"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/recipes"
	"github.com/sourcegraph/conc/pool"
)

// draw returns the next batch of training questions: a deterministic
// shuffle of the training mix per epoch, read from a cursor.
func (ru *run) draw(n int) []dataset.Question {
	out := make([]dataset.Question, 0, n)
	for len(out) < n {
		epoch, pos := ru.cursor/len(ru.train), ru.cursor%len(ru.train)
		perm := rand.New(rand.NewPCG(uint64(ru.r.Seed), uint64(epoch))).Perm(len(ru.train))
		out = append(out, ru.train[perm[pos]])
		ru.cursor++
	}
	return out
}

// groupState gathers a group's trajectories as they finish.
type groupState struct {
	trajs []*Trajectory
	left  atomic.Int32
}

// collectResult is what a collection started ahead delivers.
type collectResult struct {
	c   *collected
	err error
}

// collected is a step's rollouts, critiques and datums, before the
// optimiser step.
type collected struct {
	step    int
	model   string // the policy model the step sampled from
	groups  []*groupState
	sent    []keyedDatum // datums in the order they reached the sender
	clock   *phaseClock
	t0      time.Time
	fb      []map[string]float64
	streamd bool // datums went to forward_backward while rolling out
	// sampled records which replica sampled with which weights.
	sampled *sampledBy

	critiques, critiqueFailures, opdTokens int64
	opdSum                                 float64
}

// collect runs steps 1-5 of DESIGN §2 for one step: draw, roll out with
// model, score, advantages, hindsight. With stream set (the on-policy async
// schedule) each finished group's datums go to forward_backward at once,
// while other groups still roll out; otherwise finish sends them.
func (ru *run) collect(ctx context.Context, step int, model string, stream bool) (*collected, error) {
	r := ru.r
	c := &collected{step: step, model: model, clock: newPhaseClock(), t0: time.Now(), streamd: stream}
	clock := c.clock
	ru.roller.phases, ru.hinter.phases = clock, clock
	ru.roller.resetStep(ctx)
	// A replica that failed to load the weights at the last sync gets them
	// now; none holding them fails the step.
	if err := ru.ensure(ctx, model); err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	c.sampled = &sampledBy{}
	ru.roller.sampled = c.sampled
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	qs := ru.draw(r.Train.BatchSize)
	G := r.Train.GroupSize
	task := ru.Progress.Start(fmt.Sprintf("rollout step %d", step), len(qs)*G, "trajectories")
	defer task.Done()
	ru.roller.progress = task
	sp := roles.TrainSampling(r)

	datums := make(chan keyedDatum, len(qs)*G)
	var trainErr error
	senderDone := make(chan struct{})
	go func() {
		defer close(senderDone)
		if !stream {
			for d := range datums {
				c.sent = append(c.sent, d)
			}
			return
		}
		var chunk []trainer.Datum
		flush := func() {
			if len(chunk) == 0 || trainErr != nil {
				return
			}
			done := clock.start("train")
			res, err := ru.trainer.ForwardBackward(ctx, ru.modelID, chunk, r.Trainer.Loss, lossConfig(r))
			done()
			if err != nil {
				trainErr = fmt.Errorf("forward_backward: %w", err)
				cancel()
				return
			}
			c.fb = append(c.fb, res.Metrics)
			chunk = nil
		}
		for d := range datums {
			c.sent = append(c.sent, d)
			chunk = append(chunk, d.datum)
			if len(chunk) >= r.Trainer.ChunkSize {
				flush()
			}
		}
		flush()
	}()

	var critiques, critiqueFailures, opdTokens atomic.Int64
	var opdMu sync.Mutex
	c.groups = make([]*groupState, len(qs))
	// Groups' hindsight runs as they complete; judge.concurrency bounds the
	// judge requests inside.
	hp := pool.New().WithContext(ctx)
	finishGroup := func(gi int) {
		g := c.groups[gi]
		rewards := make([]float64, len(g.trajs))
		for i, t := range g.trajs {
			t.score()
			rewards[i] = t.Reward
		}
		for i, a := range GroupAdvantages(rewards) {
			g.trajs[i].Advantage = a
		}
		hp.Go(func(ctx context.Context) error {
			if r.Hindsight.Enabled {
				cr, f, n, sum := ru.hindsight(ctx, g.trajs)
				critiques.Add(cr)
				critiqueFailures.Add(f)
				opdTokens.Add(n)
				opdMu.Lock()
				c.opdSum += sum
				opdMu.Unlock()
			}
			for _, t := range g.trajs {
				if !slices.Contains(t.Policy, true) {
					// No policy token (the prompt alone filled the context):
					// nothing to learn, and a zero weight sum would divide by
					// zero in trainers that normalise per sequence.
					continue
				}
				datums <- keyedDatum{group: t.Group, sample: t.Sample, datum: BuildDatum(t, ru.advantageSign, r.Hindsight.Coef)}
			}
			return nil
		})
	}
	var ls []*live
	for gi, q := range qs {
		g := &groupState{trajs: make([]*Trajectory, G)}
		g.left.Store(int32(G))
		c.groups[gi] = g
		group := (step-1)*r.Train.BatchSize + gi // globally unique group id
		for k := 0; k < G; k++ {
			g.trajs[k] = &Trajectory{ID: fmt.Sprintf("s%04d-g%06d-k%d", step, group, k), Step: step, Group: group, Sample: k, Question: q}
		}
	}
	concurrency := max(r.Policy.Concurrency*len(ru.Deps.Policies), 1)
	rollDone := clock.start("rollout")
	var rollErr error
	if r.Rollout.Schedule == recipes.ScheduleLockstep {
		rollErr = ru.prompts(ctx, c.groups, concurrency)
		if rollErr == nil {
			for _, g := range c.groups {
				for _, t := range g.trajs {
					ls = append(ls, newLive(t, model, sp, roles.Seed(r.Seed, int64(step), int64(t.Group), int64(t.Sample))))
				}
			}
			rollErr = ru.roller.lockstep(ctx, ls, concurrency)
		}
		if rollErr == nil {
			for gi := range c.groups {
				finishGroup(gi)
			}
		}
	} else {
		rp := pool.New().WithContext(ctx).WithCancelOnError().WithFirstError().WithMaxGoroutines(concurrency)
		for gi, g := range c.groups {
			var promptOnce sync.Once
			var prompt []int
			var promptErr error
			for _, t := range g.trajs {
				rp.Go(func(ctx context.Context) error {
					promptOnce.Do(func() { prompt, promptErr = ru.roller.promptIDs(ctx, t.Question.Question, "") })
					if promptErr != nil {
						return promptErr
					}
					t.PromptIDs = prompt
					if err := ru.roller.rollout(ctx, t, model, sp, roles.Seed(r.Seed, int64(step), int64(t.Group), int64(t.Sample))); err != nil {
						return err
					}
					if g.left.Add(-1) == 0 {
						finishGroup(gi)
					}
					return nil
				})
			}
		}
		rollErr = rp.Wait()
	}
	rollDone()
	_ = hp.Wait()
	close(datums)
	<-senderDone
	c.critiques, c.critiqueFailures, c.opdTokens = critiques.Load(), critiqueFailures.Load(), opdTokens.Load()
	if rollErr != nil {
		return nil, fmt.Errorf("rollout: %w", rollErr)
	}
	if trainErr != nil {
		return nil, trainErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c, nil
}

// prompts tokenizes each group's prompt once, for the lockstep schedule.
func (ru *run) prompts(ctx context.Context, groups []*groupState, concurrency int) error {
	p := pool.New().WithContext(ctx).WithCancelOnError().WithFirstError().WithMaxGoroutines(concurrency)
	for _, g := range groups {
		p.Go(func(ctx context.Context) error {
			ids, err := ru.roller.promptIDs(ctx, g.trajs[0].Question.Question, "")
			for _, t := range g.trajs {
				t.PromptIDs = ids
			}
			return err
		})
	}
	return p.Wait()
}
