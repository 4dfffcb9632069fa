package orchestrator

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hindsearch/hindsearch/clients/policy"
)

// maxAdapterBytes bounds what an adapter archive may unpack to.
const maxAdapterBytes = 16 << 30

// ArchivePath maps a trainer's sampler path (tinker://<model_id>/
// sampler_weights/<name>) to the archive SkyRL writes under its checkpoints
// base: <checkpointsDir>/<model_id>/sampler_weights/<name>.tar.gz.
func ArchivePath(checkpointsDir, tinkerPath string) (string, error) {
	rest, ok := strings.CutPrefix(tinkerPath, "tinker://")
	if !ok || rest == "" {
		return "", fmt.Errorf("sampler path %q is not a tinker:// path", tinkerPath)
	}
	clean := filepath.Clean(filepath.FromSlash(rest))
	if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("sampler path %q escapes the checkpoints directory", tinkerPath)
	}
	return filepath.Join(checkpointsDir, clean) + ".tar.gz", nil
}

// UnpackAdapter extracts a gzip tar of a PEFT adapter into dir (replacing
// any previous content) and returns the directory holding
// adapter_config.json. Entries that would escape dir are refused.
func UnpackAdapter(archive, dir string) (string, error) {
	f, err := os.Open(archive)
	if err != nil {
		return "", fmt.Errorf("adapter archive: %w", err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return "", fmt.Errorf("adapter archive %s: %w", archive, err)
	}
	tmp := dir + ".partial"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	// A refused or broken archive leaves nothing behind (after the rename
	// below, tmp no longer exists).
	defer func() { _ = os.RemoveAll(tmp) }()
	tr := tar.NewReader(gz)
	var total int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("adapter archive %s: %w", archive, err)
		}
		name := filepath.Clean(filepath.FromSlash(h.Name))
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, ".."+string(filepath.Separator)) {
			return "", fmt.Errorf("adapter archive %s: entry %q escapes the directory", archive, h.Name)
		}
		target := filepath.Join(tmp, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return "", err
			}
		case tar.TypeReg:
			total += h.Size
			if total > maxAdapterBytes {
				return "", fmt.Errorf("adapter archive %s: over %d bytes", archive, int64(maxAdapterBytes))
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return "", err
			}
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return "", err
			}
			_, err = io.Copy(out, io.LimitReader(tr, h.Size))
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return "", fmt.Errorf("adapter archive %s: %w", archive, err)
			}
		default:
			return "", fmt.Errorf("adapter archive %s: entry %q is not a file or directory", archive, h.Name)
		}
	}
	_ = os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "adapter_config.json")); err == nil {
		return dir, nil
	}
	// One level of nesting: <dir>/<sub>/adapter_config.json.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			if _, err := os.Stat(filepath.Join(dir, e.Name(), "adapter_config.json")); err == nil {
				return filepath.Join(dir, e.Name()), nil
			}
		}
	}
	return "", fmt.Errorf("adapter archive %s: no adapter_config.json", archive)
}

// loraSync makes every policy replica serve a new adapter.
type loraSync struct {
	checkpointsDir string
	dir            string
	keep           int
	loaded         []string // adapter names loaded by this run, oldest first
	paths          map[string]string
}

// restore loads on p every adapter this run keeps loaded that p lacks (a
// replica that restarted), and confirms them.
func (s *loraSync) restore(ctx context.Context, p policy.Policy) error {
	models, err := p.Models(ctx)
	if err != nil {
		return err
	}
	for _, name := range s.loaded {
		if slices.Contains(models, name) {
			continue
		}
		if err := p.LoadLoRA(ctx, name, s.paths[name]); err != nil && !policy.AlreadyLoaded(err) {
			return fmt.Errorf("reload adapter %s on %s: %w", name, p.URL(), err)
		}
	}
	models, err = p.Models(ctx)
	if err != nil {
		return err
	}
	for _, name := range s.loaded {
		if !slices.Contains(models, name) {
			return fmt.Errorf("%s does not list adapter %s after reloading it", p.URL(), name)
		}
	}
	return nil
}

// apply unpacks the sampler archive and loads it as adapter name on every
// replica, confirming it through /v1/models, then unloads adapters beyond
// the keep count. It returns the URLs of the replicas now serving name.
func (s *loraSync) apply(ctx context.Context, ps []policy.Policy, tinkerPath, name string) ([]string, error) {
	return s.load(ctx, ps, tinkerPath, name, false)
}

// load is apply; with reload set (a resumed run) an adapter of that name
// already on a replica is unloaded first, since it may be stale.
func (s *loraSync) load(ctx context.Context, ps []policy.Policy, tinkerPath, name string, reload bool) ([]string, error) {
	archive, err := ArchivePath(s.checkpointsDir, tinkerPath)
	if err != nil {
		return nil, fmt.Errorf("sync: %w", err)
	}
	path, err := UnpackAdapter(archive, filepath.Join(s.dir, name))
	if err != nil {
		return nil, fmt.Errorf("sync: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sync: %w", err)
	}
	var served []string
	for _, p := range ps {
		if reload {
			_ = p.UnloadLoRA(ctx, name) // absent after a restart: nothing to do
		}
		// Load, then confirm through /v1/models; a load that answered but
		// did not take (a garbled answer, a restarted replica) is tried
		// again a few times.
		var confirmed bool
		for try := 0; try < 3 && !confirmed; try++ {
			if err := p.LoadLoRA(ctx, name, abs); err != nil && !policy.AlreadyLoaded(err) {
				return served, fmt.Errorf("sync: load adapter %s on %s: %w", name, p.URL(), err)
			}
			models, err := p.Models(ctx)
			if err != nil {
				return served, fmt.Errorf("sync: confirm adapter %s on %s: %w", name, p.URL(), err)
			}
			confirmed = slices.Contains(models, name)
		}
		if !confirmed {
			return served, fmt.Errorf("sync: %s does not list adapter %s after loading it three times", p.URL(), name)
		}
		served = append(served, p.URL())
	}
	s.loaded = append(s.loaded, name)
	if s.paths == nil {
		s.paths = map[string]string{}
	}
	s.paths[name] = abs
	for len(s.loaded) > s.keep {
		old := s.loaded[0]
		s.loaded = s.loaded[1:]
		for _, p := range ps {
			// An adapter that cannot be unloaded only costs memory.
			_ = p.UnloadLoRA(ctx, old)
		}
		_ = os.RemoveAll(filepath.Join(s.dir, old))
		delete(s.paths, old)
	}
	return served, nil
}
