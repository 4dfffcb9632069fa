package orchestrator

import (
	"context"
	"sync"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/orchestrator/rollout"
	"github.com/hindsearch/hindsearch/recipes"
)

// hindsight critiques a group's failed trajectories and sets their OPD
// terms. It returns the counts of critiques used, critique failures, OPD
// tokens (non-zero terms) and the sum of the OPD terms, and under
// hindsight.broadcast earliest the critiques that named no search of
// their trajectory (among the failures). Failures are counted, never
// fatal.
func (ru *run) hindsight(ctx context.Context, trajs []*rollout.Trajectory) (used, failed, tokens int64, sum float64, unnamed int64) {
	// The group's failed trajectories are critiqued and scored together:
	// the last group of a step then costs one judge and one teacher latency,
	// not one per failed trajectory.
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, t := range trajs {
		if t.Reward > 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok := ru.hindsightOne(ctx, t, trajs)
			mu.Lock()
			defer mu.Unlock()
			if !ok {
				failed++
				if t.CritiqueError == errNoStep {
					unnamed++
				}
				return
			}
			used++
			for _, d := range t.OPD {
				if d != 0 {
					tokens++
					sum += d
				}
			}
		}()
	}
	wg.Wait()
	return used, failed, tokens, sum, unnamed
}

// hindsightOne critiques one failed trajectory of group and sets its OPD
// term; false means no usable critique or teacher score (recorded on t).
// Under hindsight.hint siblings the critique is the group's siblings hint,
// and no judge is asked.
func (ru *run) hindsightOne(ctx context.Context, t *rollout.Trajectory, group []*rollout.Trajectory) bool {
	var c, why string
	var err error
	if ru.hinter.siblings {
		t.HintFrom = recipes.HintSiblings
		c, why = ru.hinter.siblingsHint(t, group)
	} else {
		if err := ru.judgeSem.acquire(ctx); err != nil {
			t.CritiqueError = err.Error()
			return false
		}
		c, why, err = ru.hinter.critique(ctx, t)
		ru.judgeSem.release()
	}
	switch {
	case err != nil:
		t.CritiqueError = err.Error()
		return false
	case why != "":
		t.Critique, t.CritiqueError = c, why
		return false
	}
	t.Critique = c
	if ru.r.Hindsight.Loss == recipes.HindsightLossNone {
		return true
	}
	if ru.r.Hindsight.Broadcast == recipes.BroadcastEarliest {
		if _, ok := earliestMask(t, t.FirstWrongSearch); !ok {
			t.CritiqueError = errNoStep
			return false
		}
	}
	tp, err := ru.rollouts.PromptIDs(ctx, t.Question.Question, ru.hinter.hintText(c))
	student := t.Logprobs
	if err == nil && ru.scoreSem != nil {
		if err = ru.scoreSem.acquire(ctx); err == nil {
			defer ru.scoreSem.release()
		}
	}
	if err == nil && ru.scoreGate != nil {
		// Waits for the policy turns in flight; new ones wait for this.
		ru.scoreGate.Lock()
		defer ru.scoreGate.Unlock()
	}
	if err == nil && ru.r.Hindsight.StudentLogprobs == recipes.StudentLogprobsRescored {
		// The student's tokens scored by the teacher's prefill route, in
		// the context that sampled them, by the model that sampled them.
		// On the trajectory's replica: its prefix cache holds the context.
		err = ru.rollouts.Replicas.CallKey(ctx, t.Model, t.PinKey(ru.rollouts.Replicas), func(p policy.Policy) (err error) {
			student, err = ru.hinter.rescore(ctx, t, p, ru.rollouts.Replicas.Wire(t.Model))
			return err
		})
		t.StudentRescored = err == nil
	}
	if err == nil {
		tm := ru.teacherModel(t)
		if ru.r.TeacherOnReferences() {
			// The frozen fleet that serves the KL reference: policy.model
			// there is the initial policy all run long, whatever the sync.
			t.OPD, err = ru.hinter.opd(ctx, t, tp, ru.nextReference(), tm, student)
		} else {
			err = ru.rollouts.Replicas.CallFor(ctx, tm, func(p policy.Policy) (err error) {
				t.OPD, err = ru.hinter.opd(ctx, t, tp, p, ru.rollouts.Replicas.Wire(tm), student)
				return err
			})
		}
	}
	if err != nil {
		t.CritiqueError = err.Error()
		return false
	}
	return true
}

// semaphore bounds concurrent calls.
type semaphore chan struct{}

func (s semaphore) acquire(ctx context.Context) error {
	select {
	case s <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s semaphore) release() { <-s }

// teacherOnPolicyServers says whether the policy servers (or, with sync.kind
// tinker, the base-model sessions) must keep serving the initial weights
// for an initial-policy teacher: not when the reference servers score it.
func (ru *run) teacherOnPolicyServers() bool {
	h := ru.r.Hindsight
	return h.Enabled && h.Teacher == recipes.TeacherInitial && !ru.r.TeacherOnReferences()
}

// teacherModel is the model name that scores t's teacher context: self is
// the policy that sampled t.
func (ru *run) teacherModel(t *rollout.Trajectory) string {
	switch ru.r.Hindsight.Teacher {
	case recipes.TeacherSelf:
		return t.Model
	case recipes.TeacherInitial:
		return ru.r.Policy.Model
	default:
		return ru.r.Hindsight.Teacher
	}
}
