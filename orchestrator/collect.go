package orchestrator

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/orchestrator/dataset"
	"github.com/hindsearch/hindsearch/orchestrator/fleet"
	"github.com/hindsearch/hindsearch/orchestrator/metrics"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/orchestrator/rollout"
	"github.com/hindsearch/hindsearch/recipes"
)

// draw returns the next batch of training questions: a deterministic
// shuffle of the training mix per epoch, read from a cursor.
func (ru *run) draw(n int) []dataset.Question {
	out := make([]dataset.Question, 0, n)
	for len(out) < n {
		epoch, pos := ru.cursor/len(ru.trainSet), ru.cursor%len(ru.trainSet)
		perm := rand.New(rand.NewPCG(uint64(ru.r.Seed), uint64(epoch))).Perm(len(ru.trainSet))
		out = append(out, ru.trainSet[perm[pos]])
		ru.cursor++
	}
	return out
}

// groupState gathers a group's trajectories as they finish.
type groupState struct {
	trajs []*rollout.Trajectory
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
	step   int
	model  string // the policy model the step sampled from
	groups []*groupState
	// built are the datums as their groups finished, before the loss
	// aggregation's scaling; sent are the datums as sent to the trainer,
	// in the order sent (train.go).
	built, sent []keyedDatum
	firstGroup  int    // the group id of the step's first group
	groupDone   []bool // which groups' datums the sender has
	nextMB      int    // the next mini-batch to train
	// chunked: the step is one mini-batch in the backend's own loss
	// aggregation, so its datums go to forward_backward chunk by chunk
	// as they come (streamd), before the step is complete.
	chunked bool
	chunk   []trainer.Datum // a chunked step's datums not yet sent
	clock   *metrics.Phases
	t0      time.Time
	fb      []map[string]float64 // forward_backward's metrics, per chunk
	om      []map[string]float64 // optim_step's metrics, per mini-batch
	streamd bool                 // datums went to the trainer while rolling out
	lr      float64              // the step's scheduled learning rate
	// termScaleSum sums, over the mini-batches trained with a term of its
	// own (hindsight.term_agg search-mean), their policy tokens over their
	// term tokens; termScaleN counts them (train.go).
	termScaleSum float64
	termScaleN   int
	// opdClippable counts the OPD tokens trained where the importance
	// ratio is not 1 by construction under trainer.loss ppo (train.go).
	opdClippable int
	// klSum, klTokens, entSum and entTokens sum the k3 KL to the
	// reference and the sampled tokens' surprisal over the policy tokens.
	klSum, entSum       float64
	klTokens, entTokens int
	// sampled records which replica sampled with which weights.
	sampled *fleet.SampledBy

	critiques, critiqueFailures, opdTokens atomic.Int64
	// earliestUnnamed counts the critiques under hindsight.broadcast
	// earliest that named no search of their trajectory.
	earliestUnnamed atomic.Int64
	// filtered counts the trajectories train.filter kept out of the
	// loss; penalised the turns rollout.turn_penalty was put on.
	filtered, penalised atomic.Int64
	opdMu               sync.Mutex
	opdSum              float64
}

// trajectories are the step's trajectories, in group order.
func (c *collected) trajectories() []*rollout.Trajectory {
	var all []*rollout.Trajectory
	for _, g := range c.groups {
		all = append(all, g.trajs...)
	}
	return all
}

// startCollect collects step in the background, sampling from the weights
// train.max_off_policy_steps allows (samplingModel). Under the on-policy
// async schedule the datums stream to forward_backward as groups finish.
func (ru *run) startCollect(ctx context.Context, step int) chan collectResult {
	r := ru.r
	ch := make(chan collectResult, 1)
	model := ru.samplingModel(step)
	stream := r.Rollout.Schedule == recipes.ScheduleAsync && r.Train.MaxOffPolicySteps == 0
	go func() {
		c, err := ru.collect(ctx, step, model, stream)
		ch <- collectResult{c, err}
	}()
	return ch
}

// drain waits for a collection started ahead (nil: none), so that no
// goroutine outlives the run.
func drain(ahead chan collectResult) {
	if ahead != nil {
		<-ahead
	}
}

// collect runs steps 1-5 of DESIGN §2 for one step: draw the questions,
// roll out a group of trajectories for each with model, reward them (EM and
// the group's advantages), critique the failed ones and score them under
// the teacher (critique.go), and build their datums (batch.go). With
// stream set (the on-policy async schedule) each finished group's datums
// go to forward_backward at once, while other groups still roll out;
// otherwise train sends them.
func (ru *run) collect(ctx context.Context, step int, model string, stream bool) (*collected, error) {
	r := ru.r
	c := &collected{step: step, model: model, clock: metrics.NewPhases(), t0: time.Now(), streamd: stream}
	ru.rollouts.Phases, ru.hinter.phases = c.clock, c.clock
	ru.rollouts.ResetStep(ctx)
	// A replica that failed to load the weights at the last sync gets them
	// now; none holding them fails the step.
	if err := ru.ensure(ctx, model); err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	c.sampled = &fleet.SampledBy{}
	ru.rollouts.Sampled = c.sampled
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	qs := ru.draw(r.Train.BatchSize)
	c.groups = ru.groups(step, qs)
	task := ru.Progress.Start(fmt.Sprintf("rollout step %d", step), len(qs)*r.Train.GroupSize, "trajectories")
	defer task.Done()
	ru.rollouts.Progress = task

	c.firstGroup = (step - 1) * r.Train.BatchSize
	c.groupDone = make([]bool, len(qs))
	c.lr = learningRate(r, step)
	// With the aggregation the backend's own (recipes.NativeAgg: every
	// lossScale 1 whatever the mini-batch) and the step one mini-batch,
	// datums can go before the step is complete.
	// (Not with the term a loss of its own: its mean needs the whole
	// mini-batch's term tokens.)
	c.chunked = r.OptimSteps() == 1 && recipes.NativeAgg(r.Trainer.LossAgg, ru.backend) && !r.OPDApart()
	send := ru.startSender(ctx, c, len(qs), cancel) // train.go
	// A finished group is rewarded at once; its critiques, teacher scores,
	// reference scores and datums follow while other groups roll out
	// (judge.concurrency bounds the judge requests inside).
	var termsMu sync.Mutex
	var termsErr error
	hp := pool.New().WithContext(ctx)
	finishGroup := func(g *groupState) {
		reward(g, r.Trainer.AdvantageStd == recipes.StdUnbiased)
		hp.Go(func(ctx context.Context) error {
			if r.Hindsight.Enabled {
				c.addHindsight(ru.hindsight(ctx, g.trajs))
			}
			ds, err := ru.groupDatums(ctx, c, g)
			if err != nil {
				termsMu.Lock()
				termsErr = cmp.Or(termsErr, err)
				termsMu.Unlock()
				cancel()
				return nil
			}
			send.groups <- arrival{group: g.trajs[0].Group - c.firstGroup, datums: ds}
			return nil
		})
	}
	rollDone := c.clock.Start("rollout")
	rollErr := ru.rollOut(ctx, c, finishGroup)
	rollDone()
	_ = hp.Wait()
	// A streamed forward_backward that failed cancelled the rollouts: its
	// error is the cause, theirs ("context canceled") the consequence.
	if err := send.close(); err != nil {
		return nil, err
	}
	if termsErr != nil {
		return nil, termsErr
	}
	if rollErr != nil {
		return nil, fmt.Errorf("rollout: %w", rollErr)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ru.checkRetrieval(c.trajectories()); err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	return c, nil
}

// groups makes step's groups: GroupSize trajectories of each question,
// with globally unique group ids.
func (ru *run) groups(step int, qs []dataset.Question) []*groupState {
	r := ru.r
	G := r.Train.GroupSize
	groups := make([]*groupState, len(qs))
	for gi, q := range qs {
		g := &groupState{trajs: make([]*rollout.Trajectory, G)}
		g.left.Store(int32(G))
		groups[gi] = g
		group := (step-1)*r.Train.BatchSize + gi // globally unique group id
		for k := 0; k < G; k++ {
			g.trajs[k] = &rollout.Trajectory{ID: fmt.Sprintf("s%04d-g%06d-k%d", step, group, k), Step: step, Group: group, Sample: k, Question: q}
		}
	}
	return groups
}

// groupDatums builds a finished group's datums (BuildDatum), with the
// reference logprobs of the KL term when trainer.kl_coef is set, and adds
// its KL and entropy estimates to c. A trajectory without a policy token
// (the prompt alone filled the context) has nothing to learn and none: a
// zero weight sum would divide by zero in trainers that normalise per
// sequence. Neither has a trajectory that commits a cause of train.filter:
// its reward still counted in its group's advantages (reward), as
// SearchAgent-Zero masks such a trajectory's tokens after computing the
// group's statistics over all of it (docs/watching.md).
func (ru *run) groupDatums(ctx context.Context, c *collected, g *groupState) ([]keyedDatum, error) {
	r := ru.r
	terms := Terms{Sign: ru.advantageSign, OPDCoef: r.Hindsight.Coef, KLCoef: r.Trainer.KLCoef, EntropyCoef: r.Trainer.EntropyCoef,
		OPDApart: r.OPDApart()}
	if r.Rollout.TurnPenalty > 0 {
		terms.TurnPenalty, terms.PenaltyCauses = r.Rollout.TurnPenalty, r.Rollout.TurnPenaltyCauses
	}
	var ds []keyedDatum
	for _, t := range g.trajs {
		if t.Abnormal(r.Train.Filter) {
			c.filtered.Add(1)
			continue
		}
		if terms.TurnPenalty > 0 {
			if _, k := t.PenaltyMask(terms.PenaltyCauses); k > 0 {
				c.penalised.Add(int64(k))
			}
		}
		n := 0
		for _, p := range t.Policy {
			if p {
				n++
			}
		}
		if n == 0 {
			continue
		}
		var ref []float64
		if r.Trainer.KLCoef > 0 {
			var err error
			if ref, err = ru.reference(ctx, t); err != nil {
				return nil, fmt.Errorf("trajectory %s: %w", t.ID, err)
			}
		}
		kl, ent := 0.0, 0.0
		for j, p := range t.Policy {
			if !p {
				continue
			}
			ent -= t.Logprobs[j]
			if ref != nil {
				k, _ := KLTerm(t.Logprobs[j], ref[j])
				kl += k
			}
		}
		c.opdMu.Lock()
		c.entSum, c.entTokens = c.entSum+ent, c.entTokens+n
		if ref != nil {
			c.klSum, c.klTokens = c.klSum+kl, c.klTokens+n
		}
		c.opdMu.Unlock()
		kd := keyedDatum{group: t.Group, sample: t.Sample, datum: BuildDatum(t, terms, ref), tokens: n}
		for j, d := range t.OPD {
			if d != 0 && t.Policy[j] {
				kd.opdTokens++
			}
		}
		if terms.OPDApart && t.Reward <= 0 {
			kd.opd, kd.termTokens = termPositions(t, r.Hindsight.Broadcast)
		}
		ds = append(ds, kd)
	}
	return ds, nil
}

// reward scores a finished group's trajectories (exact match, F1) and
// sets their GRPO advantages (unbiased: the n-1 standard deviation).
func reward(g *groupState, unbiased bool) {
	rewards := make([]float64, len(g.trajs))
	for i, t := range g.trajs {
		t.Score()
		rewards[i] = t.Reward
	}
	for i, a := range GroupAdvantages(rewards, unbiased) {
		g.trajs[i].Advantage = a
	}
}

// addHindsight adds a group's hindsight counts (ru.hindsight's results).
func (c *collected) addHindsight(used, failed, tokens int64, sum float64, unnamed int64) {
	c.critiques.Add(used)
	c.critiqueFailures.Add(failed)
	c.earliestUnnamed.Add(unnamed)
	c.opdTokens.Add(tokens)
	c.opdMu.Lock()
	c.opdSum += sum
	c.opdMu.Unlock()
}

// rollOut rolls out every group of c on c.model with the train.* sampling
// (rollout.go) and calls finished with each group once all of its
// trajectories have ended: as each group ends under the async schedule,
// all of them after the whole batch under lockstep.
func (ru *run) rollOut(ctx context.Context, c *collected, finished func(*groupState)) error {
	r := ru.r
	sp := roles.TrainSampling(r)
	seed := func(t *rollout.Trajectory) int64 {
		return roles.Seed(r.Seed, int64(c.step), int64(t.Group), int64(t.Sample))
	}
	concurrency := max(r.Policy.Concurrency*len(ru.Deps.Policies), 1)
	if r.Rollout.Schedule == recipes.ScheduleLockstep {
		if err := ru.prompts(ctx, c.groups, concurrency); err != nil {
			return err
		}
		var ls []*rollout.Live
		for _, g := range c.groups {
			for _, t := range g.trajs {
				ls = append(ls, rollout.NewLive(t, c.model, sp, seed(t)))
			}
		}
		if err := ru.rollouts.Lockstep(ctx, ls, concurrency); err != nil {
			return err
		}
		for _, g := range c.groups {
			finished(g)
		}
		return nil
	}
	rp := pool.New().WithContext(ctx).WithCancelOnError().WithFirstError().WithMaxGoroutines(concurrency)
	for _, g := range c.groups {
		var promptOnce sync.Once
		var prompt []int
		var promptErr error
		for _, t := range g.trajs {
			rp.Go(func(ctx context.Context) error {
				promptOnce.Do(func() { prompt, promptErr = ru.rollouts.PromptIDs(ctx, t.Question.Question, "") })
				if promptErr != nil {
					return promptErr
				}
				t.PromptIDs = prompt
				if err := ru.rollouts.Rollout(ctx, t, c.model, sp, seed(t)); err != nil {
					return err
				}
				if g.left.Add(-1) == 0 {
					finished(g)
				}
				return nil
			})
		}
	}
	return rp.Wait()
}

// prompts tokenizes each group's prompt once, for the lockstep schedule.
func (ru *run) prompts(ctx context.Context, groups []*groupState, concurrency int) error {
	p := pool.New().WithContext(ctx).WithCancelOnError().WithFirstError().WithMaxGoroutines(concurrency)
	for _, g := range groups {
		p.Go(func(ctx context.Context) error {
			ids, err := ru.rollouts.PromptIDs(ctx, g.trajs[0].Question.Question, "")
			for _, t := range g.trajs {
				t.PromptIDs = ids
			}
			return err
		})
	}
	return p.Wait()
}
