package fleet

import (
	"context"
	"fmt"
	"slices"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/tinker"
	"github.com/hindsearch/hindsearch/clients/trainer"
)

// SessionSync is a sync.kind whose weights reach the policy as a Tinker
// sampling session the trainer's ephemeral save made (sync.kind tinker):
// the run saves with trainer.SaveForSampling and hands the session here,
// instead of a path to Apply.
type SessionSync interface {
	Sync
	// Serve makes the policy sample weights name from the sampling
	// session ss, and forgets the names beyond the keep newest (pinned
	// names aside).
	Serve(name string, ss trainer.SamplerSession)
	// Pin keeps name served however many newer names Serve adds.
	Pin(name string)
}

// tinkerSync is sync.kind tinker: the policy is the Tinker server that
// trains (policy.server tinker), and each step's weights are served
// through the sampling session of an ephemeral save_weights_for_sampler,
// made by the run. Nothing is archived, unpacked or loaded: the sampler
// checkpoints stay on the server, where the run's retention deletes them.
type tinkerSync struct {
	ps   []*tinker.Client
	keep int
	// order names the weights served, oldest first; pinned are never
	// forgotten (and not counted against keep).
	order  []string
	pinned map[string]bool
}

var _ SessionSync = (*tinkerSync)(nil)

// newTinkerSync builds sync.kind tinker over reps, whose policies must
// all be Tinker clients; keep is how many weights stay served.
func newTinkerSync(reps *Replicas, keep int) (*tinkerSync, error) {
	s := &tinkerSync{keep: max(keep, 1)}
	for _, rp := range reps.all() {
		p := rp.p
		tc, ok := p.(*tinker.Client)
		if !ok {
			return nil, fmt.Errorf("sync.kind tinker: policy %s is not a Tinker server's client (policy.server tinker)", p.URL())
		}
		s.ps = append(s.ps, tc)
	}
	return s, nil
}

// Serve serves name through ss on every Tinker policy.
func (s *tinkerSync) Serve(name string, ss trainer.SamplerSession) {
	for _, p := range s.ps {
		p.Serve(name, ss.SessionID)
	}
	if s.pinned[name] {
		return
	}
	s.order = append(slices.DeleteFunc(s.order, func(n string) bool { return n == name }), name)
	for len(s.order) > s.keep {
		for _, p := range s.ps {
			p.Forget(s.order[0])
		}
		s.order = s.order[1:]
	}
}

// Pin keeps name served: it leaves the keep window's order.
func (s *tinkerSync) Pin(name string) {
	if s.pinned == nil {
		s.pinned = map[string]bool{}
	}
	s.pinned[name] = true
	s.order = slices.DeleteFunc(s.order, func(n string) bool { return n == name })
}

// Apply serves the sampler weights at tinkerPath as name through a
// sampling session made from the path (create_sampling_session with
// model_path): for weights saved by name, not by the run's own
// ephemeral saves (which go through Serve).
func (s *tinkerSync) Apply(ctx context.Context, tinkerPath, name string) error {
	for _, p := range s.ps {
		if err := p.LoadLoRA(ctx, name, tinkerPath); err != nil {
			return fmt.Errorf("sync: %w", err)
		}
	}
	s.order = append(s.order, name)
	return nil
}

// Ensure fails when model has no sampling session.
func (s *tinkerSync) Ensure(_ context.Context, model string) error {
	for _, p := range s.ps {
		if !p.Serves(model) {
			return fmt.Errorf("sync: %s has no sampling session for %s", p.URL(), model)
		}
	}
	return nil
}

// Restore needs nothing: sampling sessions live on the server.
func (s *tinkerSync) Restore(context.Context, policy.Policy) error { return nil }

// Begin needs nothing: the run serves the initial weights itself (an
// ephemeral save of the new model, see Serve).
func (s *tinkerSync) Begin(context.Context) error { return nil }

// Resume needs nothing here: a resumed run serves the restored weights
// through a new ephemeral save (the interrupted run's sampling sessions
// named a model that is no longer loaded).
func (s *tinkerSync) Resume(context.Context, []string, map[string]string) error { return nil }
