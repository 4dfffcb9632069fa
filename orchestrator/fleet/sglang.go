package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/hindsearch/hindsearch/clients/policy"
)

// sglangSync is sync.kind sglang_disk: each step's weights are a full
// model, unpacked to sync.dir/<name> and loaded in place of every replica's
// weights with SGLang's /update_weights_from_disk; requests go on naming
// the base model, and the book tracks which version each replica holds.
// Only the sync.keep newest model directories stay on disk, and never one
// a replica was last loaded from successfully. SGLang does not read that
// one again: its weight updater sets the new path before it loads, so a
// load that fails part way is rolled back by reading the failed path
// (model_runner_components/weight_updater.py), and the replica then holds
// weights nobody knows; the book counts it as holding none until a load
// succeeds.
//
// A successful load renames the model SGLang serves to the path loaded
// (tokenizer_manager.py _update_model_path_info): /v1/models and
// /get_model_info report it, and SGLang serves its base weights again only
// after a load of the base model's own path (policy.model, an HF repo id or
// directory its loader resolves). So a fresh run reloads policy.model on a
// replica that serves another name before it samples (begin), and a
// resumed run reloads the weights its state names whatever a replica
// reports (resume).
type sglangSync struct {
	syncState
	// current[i] is the weights replica i last loaded ("" or absent: its
	// initial weights), under mu: replicas load at once.
	mu      sync.Mutex
	current map[int]string
}

// setCurrent records that replica i last loaded name.
func (s *sglangSync) setCurrent(i int, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.current[i] = name
}

// loadOn loads the weights name on replica i; the book records the
// outcome.
func (s *sglangSync) loadOn(ctx context.Context, i int, name string) error {
	p := s.reps.Policy(i)
	path := s.paths[name]
	if err := p.UpdateWeightsFromDisk(ctx, path); err != nil {
		// Whatever it held before, it now holds unknown weights (see
		// above): the book drains it from every tracked version.
		err = fmt.Errorf("load weights %s on %s: %w%s", name, p.URL(), err, peftHint(path))
		s.book.failed(i, name, err)
		return err
	}
	s.setCurrent(i, name)
	s.book.loaded(i, name)
	return nil
}

// peftHint explains a refused load of a directory that holds a PEFT
// adapter rather than a merged model, config.json or not (SkyRL's FSDP
// export of a LoRA model writes the base model's config beside the
// adapter, as read in fsdp_strategy.py save_hf_model).
func peftHint(dir string) string {
	if exists(filepath.Join(dir, "adapter_config.json")) {
		return " (the sampler archive holds a PEFT adapter, not a merged model: sync.kind sglang_disk needs a trainer that saves full weights; use sync.kind lora for adapters)"
	}
	return ""
}

// Apply unpacks the sampler archive (a merged model) and loads it on every
// replica that is up, then removes the model directories beyond keep.
func (s *sglangSync) Apply(ctx context.Context, tinkerPath, name string) error {
	if _, err := s.unpack(tinkerPath, name, UnpackModel); err != nil {
		return err
	}
	s.book.track(name)
	onEach(s.reps.upIndices(), func(i int) { _ = s.loadOn(ctx, i, name) })
	if !s.reps.holder(name) {
		// Nobody loaded it: its (large) directory goes; a resumed run
		// unpacks it again.
		if !s.inUse(name) {
			_ = os.RemoveAll(filepath.Join(s.dir, name))
			delete(s.paths, name)
		}
		return fmt.Errorf("sync: %w", s.reps.missing(name))
	}
	s.order = append(s.order, name)
	s.evict()
	return nil
}

// inUse reports whether some replica was last loaded from name.
func (s *sglangSync) inUse(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.current {
		if n == name {
			return true
		}
	}
	return false
}

// evict removes the oldest model directories beyond keep that no replica
// was last loaded from.
func (s *sglangSync) evict() {
	excess := len(s.order) - s.keep
	var kept []string
	for _, n := range s.order {
		if excess > 0 && !s.inUse(n) {
			_ = os.RemoveAll(filepath.Join(s.dir, n))
			delete(s.paths, n)
			excess--
			continue
		}
		kept = append(kept, n)
	}
	s.order = kept
}

// Ensure loads model on every replica up that lacks it (one whose load
// failed at the last sync).
func (s *sglangSync) Ensure(ctx context.Context, model string) error {
	return s.ensureWith(ctx, model, s.loadOn)
}

// Restore loads the weights in use on p again (it may have restarted with
// its initial weights; loading them again is harmless otherwise). Before
// the first sync it holds the base weights.
func (s *sglangSync) Restore(ctx context.Context, p policy.Policy) error {
	i := s.reps.indexOf(p)
	if i < 0 {
		return fmt.Errorf("sync: %s is not a policy replica of this run", p.URL())
	}
	if len(s.order) == 0 {
		s.book.reset(i, s.book.base)
		return nil
	}
	if err := s.loadOn(ctx, i, s.order[len(s.order)-1]); err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	return nil
}

// Resume unpacks and loads the weights in use (the last of names) on every
// replica up; older ones are not needed (no off-policy sampling).
func (s *sglangSync) Resume(ctx context.Context, names []string, samplers map[string]string) error {
	if len(names) == 0 {
		return s.Begin(ctx)
	}
	name := names[len(names)-1]
	if _, err := s.unpack(samplers[name], name, UnpackModel); err != nil {
		return err
	}
	s.book.track(name)
	onEach(s.reps.upIndices(), func(i int) { _ = s.loadOn(ctx, i, name) })
	if !s.reps.holder(name) {
		return fmt.Errorf("sync: %w", s.reps.missing(name))
	}
	s.order = []string{name}
	return nil
}

// Begin reloads the base weights (policy.model as the model path) on every
// replica up that does not serve policy.model: one renamed by an earlier
// run's loads. A replica that cannot load them holds no known weights; when
// none holds the base weights after, it fails naming each replica, what it
// serves and what to do.
func (s *sglangSync) Begin(ctx context.Context) error {
	base := s.book.base
	onEach(s.reps.upIndices(), func(i int) {
		p := s.reps.Policy(i)
		models, err := p.Models(ctx)
		if err == nil && slices.Contains(models, base) {
			return
		}
		serves := "an unknown model"
		if len(models) > 0 {
			serves = models[0]
		}
		if err := p.UpdateWeightsFromDisk(ctx, base); err != nil {
			s.book.failed(i, base, fmt.Errorf("it serves %s (SGLang renames the model after /update_weights_from_disk), and reloading policy.model %s there failed: %w; restart SGLang on %s, or set policy.model to the model path it was started with", serves, base, err, p.URL()))
			return
		}
		s.setCurrent(i, "")
		s.book.loaded(i, base)
	})
	if !s.reps.holder(base) {
		return fmt.Errorf("sync: %w", s.reps.missing(base))
	}
	return nil
}
