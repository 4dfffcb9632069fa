package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/hindsearch/hindsearch/clients/policy"
)

// loraSync is sync.kind lora: each step's weights are a PEFT adapter,
// unpacked to sync.dir/<name>, hot-loaded on every replica under its own
// name (/v1/load_lora_adapter) and confirmed through /v1/models; adapters
// older than the keep newest are unloaded and their directories removed.
type loraSync struct {
	syncState
}

// loadOn loads adapter name on replica i and confirms it through
// /v1/models, loading again (up to three times) when a load answered but
// did not take (a garbled answer, a replica that restarted meanwhile). The
// book records the outcome.
func (s *loraSync) loadOn(ctx context.Context, i int, name string) error {
	p := s.reps.Policy(i)
	err := func() error {
		for try := 0; try < 3; try++ {
			if err := p.LoadLoRA(ctx, name, s.paths[name]); err != nil && !policy.AlreadyLoaded(err) {
				return fmt.Errorf("load adapter %s on %s: %w", name, p.URL(), err)
			}
			models, err := p.Models(ctx)
			if err != nil {
				return fmt.Errorf("confirm adapter %s on %s: %w", name, p.URL(), err)
			}
			if slices.Contains(models, name) {
				return nil
			}
		}
		return fmt.Errorf("%s does not list adapter %s after loading it three times", p.URL(), name)
	}()
	if err != nil {
		s.book.failed(i, name, err)
		return err
	}
	s.book.loaded(i, name)
	return nil
}

// Apply unpacks the sampler archive and loads it as adapter name on every
// replica that is up (with any kept adapter a replica failed to load
// before), then unloads the adapters beyond the keep newest.
func (s *loraSync) Apply(ctx context.Context, tinkerPath, name string) error {
	if _, err := s.unpack(tinkerPath, name, UnpackAdapter); err != nil {
		return err
	}
	s.book.track(name)
	all := append(slices.Clone(s.order), name)
	kept := all[max(len(all)-s.keep, 0):]
	onEach(s.reps.upIndices(), func(i int) {
		// A replica that outlived an earlier run of this recipe (an
		// ablation's previous variant, a rerun, the killed run a resume
		// continues) may hold an adapter of this very name with other
		// weights, and a load of a name already loaded is refused, which
		// loadOn takes for done: drop it first (absent: nothing to do).
		_ = s.reps.Policy(i).UnloadLoRA(ctx, name)
		for _, n := range kept {
			if n == name || !s.book.has(i, n) {
				_ = s.loadOn(ctx, i, n) // recorded in the book
			}
		}
	})
	if !s.reps.holder(name) {
		return fmt.Errorf("sync: %w", s.reps.missing(name))
	}
	s.order = kept
	for _, old := range all[:len(all)-len(kept)] {
		for i, rp := range s.reps.all() {
			if !rp.down.Load() {
				// An adapter that cannot be unloaded only costs memory.
				_ = rp.p.UnloadLoRA(ctx, old)
			}
			s.book.dropped(i, old)
		}
		d := s.dirOf(old)
		_ = os.RemoveAll(d)
		_ = os.Remove(filepath.Dir(d)) // the model's directory, once empty
		delete(s.paths, old)
		delete(s.dirs, old)
	}
	// In router mode the router drops every replica that failed to load
	// name before a request names it.
	return s.reps.syncRouter(ctx, false)
}

// Begin needs nothing: adapters are served under their own names, beside
// the base weights.
func (s *loraSync) Begin(context.Context) error { return nil }

// Ensure loads adapter model on every replica up that lacks it.
func (s *loraSync) Ensure(ctx context.Context, model string) error {
	if err := s.ensureWith(ctx, model, s.loadOn); err != nil {
		return err
	}
	return s.reps.syncRouter(ctx, false)
}

// Restore loads on p every kept adapter it does not list (a replica that
// restarted serves none), and confirms them.
func (s *loraSync) Restore(ctx context.Context, p policy.Policy) error {
	i := s.reps.indexOf(p)
	if i < 0 {
		return fmt.Errorf("sync: %s is not a policy replica of this run", p.URL())
	}
	models, err := p.Models(ctx)
	if err != nil {
		return err
	}
	held := []string{s.book.base}
	for _, n := range s.order {
		if slices.Contains(models, n) {
			held = append(held, n)
		}
	}
	s.book.reset(i, held...)
	for _, n := range s.order {
		if slices.Contains(models, n) {
			continue
		}
		if err := s.loadOn(ctx, i, n); err != nil {
			return fmt.Errorf("reload: %w", err)
		}
	}
	return nil
}

// Resume unpacks and loads a resumed run's adapters on every replica up;
// an adapter of the same name already loaded is unloaded first, since it
// may be stale (another run's, or older weights).
func (s *loraSync) Resume(ctx context.Context, names []string, samplers map[string]string) error {
	for _, name := range names {
		if _, err := s.unpack(samplers[name], name, UnpackAdapter); err != nil {
			return err
		}
		onEach(s.reps.upIndices(), func(i int) {
			_ = s.reps.Policy(i).UnloadLoRA(ctx, name) // absent after a restart: nothing to do
			s.book.dropped(i, name)
			_ = s.loadOn(ctx, i, name)
		})
		if !s.reps.holder(name) {
			return fmt.Errorf("sync: %w", s.reps.missing(name))
		}
		s.order = append(s.order, name)
	}
	return s.reps.syncRouter(ctx, false)
}
