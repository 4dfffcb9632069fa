package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/recipes"
)

// serveFullWeights loads full weights (a model directory, or an
// archive unpacked under sync.dir) on every replica with
// /update_weights_from_disk; the replicas keep serving the base model name.
func serveFullWeights(ctx context.Context, r *recipes.Recipe, ps []policy.Policy, ckpt, name string, isDir bool) (string, error) {
	path := ckpt
	if !isDir {
		var err error
		if path, err = UnpackModel(ckpt, filepath.Join(r.Sync.Dir, name)); err != nil {
			return "", fmt.Errorf("--checkpoint: %w", err)
		}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	for _, p := range ps {
		if err := p.UpdateWeightsFromDisk(ctx, abs); err != nil {
			return "", fmt.Errorf("--checkpoint: load %s on %s: %w", abs, p.URL(), err)
		}
	}
	return r.Policy.Model, nil
}

// ServeCheckpoint makes every replica of ps serve ckpt, the --checkpoint
// of a standalone evaluation, and returns the model name to request: ""
// is policy.model; a path is an adapter (a directory, or a sampler archive
// unpacked under sync.dir) loaded under its file name, or with sync.kind
// sglang_disk full weights loaded in place under policy.model; a
// tinker:// path is sampler weights a Tinker server saved, served through
// a sampling session (policy.server tinker); anything else must be a model
// every replica already serves. Errors name --checkpoint and the replica.
func ServeCheckpoint(ctx context.Context, r *recipes.Recipe, ps []policy.Policy, ckpt string) (string, error) {
	if ckpt == "" {
		return r.Policy.Model, nil
	}
	if strings.HasPrefix(ckpt, "tinker://") {
		// Sampler weights a Tinker server saved: a Tinker policy samples
		// them through a sampling session over the path.
		name := reUnsafeName.ReplaceAllString(strings.TrimPrefix(ckpt, "tinker://"), "_")
		for _, p := range ps {
			if err := p.LoadLoRA(ctx, name, ckpt); err != nil && !policy.AlreadyLoaded(err) {
				return "", fmt.Errorf("--checkpoint: %w", err)
			}
		}
		return name, nil
	}
	info, err := os.Stat(ckpt)
	if err != nil {
		// A model name: every replica must serve it.
		for _, p := range ps {
			models, err := p.Models(ctx)
			if err != nil {
				return "", fmt.Errorf("--checkpoint: %w", err)
			}
			if !slices.Contains(models, ckpt) {
				return "", fmt.Errorf("--checkpoint %q: not a file and not a model %s serves (it serves %s)", ckpt, p.URL(), strings.Join(models, ", "))
			}
		}
		return ckpt, nil
	}
	name := reUnsafeName.ReplaceAllString(strings.TrimSuffix(filepath.Base(ckpt), ".tar.gz"), "_")
	path := ckpt
	if r.Sync.Kind == recipes.SyncSGLangDisk {
		return serveFullWeights(ctx, r, ps, ckpt, name, info.IsDir())
	}
	if !info.IsDir() {
		if path, err = UnpackAdapter(ckpt, filepath.Join(r.Sync.Dir, name)); err != nil {
			return "", fmt.Errorf("--checkpoint: %w", err)
		}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	for _, p := range ps {
		models, err := p.Models(ctx)
		if err != nil {
			return "", fmt.Errorf("--checkpoint: %w", err)
		}
		if slices.Contains(models, name) {
			continue
		}
		if err := p.LoadLoRA(ctx, name, abs); err != nil {
			return "", fmt.Errorf("--checkpoint: load %s on %s: %w", name, p.URL(), err)
		}
	}
	return name, nil
}

// reUnsafeName matches what may not stand in an adapter's name.
var reUnsafeName = regexp.MustCompile(`[^A-Za-z0-9_-]+`)
