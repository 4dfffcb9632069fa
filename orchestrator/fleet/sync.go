package fleet

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/recipes"
)

// maxAdapterBytes bounds what an adapter archive may unpack to.
const maxAdapterBytes = 16 << 30

// maxModelBytes bounds what a full-weights archive may unpack to.
const maxModelBytes = 1 << 40

// ArchivePath maps a trainer's sampler path, as save_weights_for_sampler
// returns it, to the archive under checkpointsDir (the trainer's
// checkpoints base). Two forms are accepted, and both name the file SkyRL
// writes, <checkpointsDir>/<model_id>/sampler_weights/<name>.tar.gz:
//
//   - tinker://<model_id>/<name>, SkyRL's answer;
//   - tinker://<model_id>/sampler_weights/<name>, the hosted service's
//     (and SkyRL's own sampling sessions').
//
// <name> must match ^[A-Za-z0-9_-]+$ and <model_id> be letters, digits,
// '_', '-', '.' or ':' (not "." or ".."). Anything else is refused with an
// error naming the path: another scheme, a missing or empty segment, a
// third segment other than sampler_weights (tinker://<id>/weights/<name> is
// a training state, not sampler weights), more segments, "." or ".."
// anywhere, a query or fragment. Nothing is cleaned: a path that would need
// cleaning is refused, so a path can never reach outside checkpointsDir.
func ArchivePath(checkpointsDir, tinkerPath string) (string, error) {
	id, kind, name, err := trainer.SplitCheckpointPath(tinkerPath)
	if err != nil {
		return "", err
	}
	if kind == "weights" {
		return "", fmt.Errorf("sampler path %q is a training state (weights/), not sampler weights", tinkerPath)
	}
	if err := trainer.CheckCheckpointRef(tinkerPath, id, name); err != nil {
		return "", err
	}
	return filepath.Join(checkpointsDir, id, "sampler_weights", name+".tar.gz"), nil
}

// UnpackAdapter extracts an archive of a PEFT adapter into dir (replacing
// any previous content) and returns the directory holding
// adapter_config.json. The archive is opened by its content: a gzip tar or
// a plain tar, whatever its name (SkyRL's JAX and FSDP layouts). Entries
// that would escape dir, links and special files are refused.
func UnpackAdapter(archive, dir string) (string, error) {
	if err := extractArchive(archive, dir, "adapter archive", maxAdapterBytes); err != nil {
		return "", err
	}
	if d, ok := findDir(dir, func(d string) bool { return exists(filepath.Join(d, "adapter_config.json")) }); ok {
		return d, nil
	}
	return "", fmt.Errorf("adapter archive %s: no adapter_config.json", archive)
}

// UnpackModel extracts an archive of full weights (a merged Hugging Face
// model directory, as SkyRL's full fine-tuning backends save; a gzip tar
// or a plain tar, opened by its content) into dir
// (replacing any previous content) and returns the model directory: the
// one holding config.json or, failing that, a .safetensors file (the
// simulated trainer's archives, see sim/policy_weights.go), in dir or one
// level below. Entries that would escape dir, links and special files are
// refused.
func UnpackModel(archive, dir string) (string, error) {
	if err := extractArchive(archive, dir, "weights archive", maxModelBytes); err != nil {
		return "", err
	}
	if d, ok := findDir(dir, func(d string) bool { return exists(filepath.Join(d, "config.json")) }); ok {
		return d, nil
	}
	if d, ok := findDir(dir, func(d string) bool {
		m, _ := filepath.Glob(filepath.Join(d, "*.safetensors"))
		return len(m) > 0
	}); ok {
		return d, nil
	}
	return "", fmt.Errorf("weights archive %s: no model (no config.json and no .safetensors file)", archive)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// findDir returns dir, or else its first subdirectory, that satisfies ok.
func findDir(dir string, ok func(string) bool) (string, bool) {
	if ok(dir) {
		return dir, true
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() && ok(filepath.Join(dir, e.Name())) {
			return filepath.Join(dir, e.Name()), true
		}
	}
	return "", false
}

// openArchive opens a sampler archive by its content, not its name: a
// gzip stream (magic 1f 8b) of a tar, as SkyRL's JAX backend writes, or a
// plain tar, as its FSDP and Megatron backends write under the same
// .tar.gz name. The tar must carry the ustar magic (ustar, PAX and GNU
// archives do; Python and Go write one of those). Anything else is an
// error naming the file.
func openArchive(archive, what string) (*tar.Reader, func(), error) {
	f, err := os.Open(archive)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	var r io.Reader = bufio.NewReader(f)
	compressed := false
	if magic, _ := r.(*bufio.Reader).Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(r)
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("%s %s: a gzip stream that does not open: %w", what, archive, err)
		}
		r, compressed = bufio.NewReader(gz), true
	}
	head, _ := r.(*bufio.Reader).Peek(512)
	if len(head) < 512 || !bytes.HasPrefix(head[257:], []byte("ustar")) {
		f.Close()
		if compressed {
			return nil, nil, fmt.Errorf("%s %s: a gzip stream that does not hold a tar archive", what, archive)
		}
		return nil, nil, fmt.Errorf("%s %s: neither a gzip stream nor a tar archive", what, archive)
	}
	return tar.NewReader(r), func() { f.Close() }, nil
}

// entryTarget returns where a tar entry goes under dir: root is true for
// the entry of the archive's root directory itself, which SkyRL's archives
// start with ("/" from the JAX backend's arcname "", "./" from the FSDP
// backend's "."; "." too). An entry is refused when its name is absolute
// (other than that root), or reaches above dir once cleaned.
func entryTarget(name string) (rel string, root bool, err error) {
	switch name {
	case "/", "./", ".":
		return "", true, nil
	}
	if strings.HasPrefix(name, "/") {
		return "", false, errors.New("escapes the directory (an absolute path)")
	}
	clean := filepath.Clean(filepath.FromSlash(name))
	if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return "", false, errors.New("escapes the directory")
	}
	if clean == "." {
		return "", true, nil
	}
	return clean, false, nil
}

// extractArchive extracts a sampler archive (opened by openArchive) into
// dir, replacing any previous content only once the whole archive
// extracted; what names the archive in errors. The archive's root entry
// stands for dir itself and must be a directory. Entries that would escape
// dir (an absolute name, a ".." above the root), links, special files, and
// an archive unpacking to more than limit bytes are refused.
func extractArchive(archive, dir, what string, limit int64) error {
	tr, closeFn, err := openArchive(archive, what)
	if err != nil {
		return err
	}
	defer closeFn()
	tmp := dir + ".partial"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	// A refused or broken archive leaves nothing behind (after the rename
	// below, tmp no longer exists).
	defer func() { _ = os.RemoveAll(tmp) }()
	var total int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		// ErrInsecurePath (GODEBUG tarinsecurepath=0) comes with the
		// header: entryTarget judges the name.
		if err != nil && !(h != nil && errors.Is(err, tar.ErrInsecurePath)) {
			return fmt.Errorf("%s %s: %w", what, archive, err)
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			continue // PAX global metadata, not an entry
		}
		rel, root, err := entryTarget(h.Name)
		if err != nil {
			return fmt.Errorf("%s %s: entry %q %v", what, archive, h.Name, err)
		}
		if root {
			if h.Typeflag != tar.TypeDir {
				return fmt.Errorf("%s %s: entry %q names the archive's root but is not a directory", what, archive, h.Name)
			}
			continue
		}
		target := filepath.Join(tmp, rel)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			total += h.Size
			if total > limit {
				return fmt.Errorf("%s %s: over %d bytes", what, archive, limit)
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, io.LimitReader(tr, h.Size))
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s %s: %w", what, archive, err)
			}
		default:
			return fmt.Errorf("%s %s: entry %q is not a file or directory", what, archive, h.Name)
		}
	}
	_ = os.RemoveAll(dir)
	return os.Rename(tmp, dir)
}

// Sync is one sync.kind: how each step's weights reach the policy
// replicas, keeping the replicas' book (which replica holds which weights)
// up to date. The run serialises its calls (syncMu).
type Sync interface {
	// apply brings the weights name, saved by the trainer at tinkerPath,
	// to every replica that is up. A replica that fails to load them is
	// left out of every request for them until it has them (it is tried
	// again at the next apply and by ensure). It fails when the weights
	// cannot be prepared or no replica holds them, naming each replica and
	// why.
	Apply(ctx context.Context, tinkerPath, name string) error
	// ensure loads model on every replica that is up and lacks it, when
	// model is weights this sync serves; it fails, naming each replica and
	// why, when no replica holds model after.
	Ensure(ctx context.Context, model string) error
	// restore gives replica p, being re-admitted after a drain (it may
	// have restarted and lost its weights), the weights in use.
	Restore(ctx context.Context, p policy.Policy) error
	// resume serves a resumed run's weights again: names oldest first,
	// with their sampler paths; the last is the weights in use.
	Resume(ctx context.Context, names []string, samplers map[string]string) error
	// begin makes the replicas that are up serve the base weights before a
	// fresh run's first request (a replica another run loaded weights
	// into may serve those).
	Begin(ctx context.Context) error
}

// NewSync builds the sync of r.Sync.Kind over reps and gives reps
// its book. It refuses what the kind cannot serve (as recipe validation
// does, for a Runner given an unvalidated recipe): sglang_disk holds one
// weights version per replica, so neither off-policy sampling (an older
// version while the newer one loads) nor the initial weights as teacher
// can be served; none serves no trained weights, so no training steps.
func NewSync(r *recipes.Recipe, reps *Replicas) (Sync, error) {
	switch r.Sync.Kind {
	case recipes.SyncLoRA:
		reps.book = newWeightBook(r.Policy.Model, false, reps.Len())
		// Off-policy sampling needs the k steps before the newest kept
		// loaded.
		return &loraSync{syncState: syncState{reps: reps, book: reps.book, checkpointsDir: r.Trainer.CheckpointsDir, uniquePaths: true,
			dir: r.Sync.Dir, keep: max(r.Sync.Keep, r.Train.MaxOffPolicySteps+2, 1)}}, nil
	case recipes.SyncSGLangDisk:
		if r.Train.MaxOffPolicySteps > 0 {
			return nil, fmt.Errorf("sync.kind %s: train.max_off_policy_steps must be 0 (got %d): a replica serves one weights version, replaced in place, so a step cannot sample older weights while newer ones load; use sync.kind %s for off-policy training",
				recipes.SyncSGLangDisk, r.Train.MaxOffPolicySteps, recipes.SyncLoRA)
		}
		h := r.Hindsight
		if h.Enabled && h.Loss != recipes.HindsightLossNone && h.Teacher == recipes.TeacherInitial && !r.TeacherOnReferences() {
			return nil, fmt.Errorf("sync.kind %s: hindsight.teacher %s needs the initial weights served, which the first sync replaces; name reference servers serving them (reference.urls), serve them under another name and set hindsight.teacher to it, or use sync.kind %s",
				recipes.SyncSGLangDisk, recipes.TeacherInitial, recipes.SyncLoRA)
		}
		reps.book = newWeightBook(r.Policy.Model, true, reps.Len())
		return &sglangSync{syncState: syncState{reps: reps, book: reps.book, checkpointsDir: r.Trainer.CheckpointsDir,
			dir: r.Sync.Dir, keep: max(r.Sync.Keep, 0)}, current: map[int]string{}}, nil
	case recipes.SyncTinker:
		// Off-policy sampling needs the k steps before the newest served.
		return newTinkerSync(reps, max(r.Sync.Keep, r.Train.MaxOffPolicySteps+2, 1))
	case recipes.SyncNone:
		// Training would sample every step from the initial weights.
		if err := r.ValidateTraining(); err != nil {
			return nil, err
		}
		return noneSync{}, nil
	}
	return nil, fmt.Errorf("sync.kind %q: want %s, %s, %s or %s", r.Sync.Kind, recipes.SyncLoRA, recipes.SyncSGLangDisk, recipes.SyncTinker, recipes.SyncNone)
}

// noneSync is sync.kind none, evaluation only: the replicas serve their
// own weights and no weights call is ever made.
type noneSync struct{}

func (noneSync) Apply(_ context.Context, _, name string) error {
	return fmt.Errorf("sync: sync.kind %s cannot serve the trained weights %s: training needs sync.kind %s, %s or %s",
		recipes.SyncNone, name, recipes.SyncLoRA, recipes.SyncSGLangDisk, recipes.SyncTinker)
}

func (noneSync) Ensure(context.Context, string) error { return nil }

func (noneSync) Begin(context.Context) error { return nil }

func (noneSync) Restore(context.Context, policy.Policy) error { return nil }

func (noneSync) Resume(_ context.Context, names []string, _ map[string]string) error {
	if len(names) > 0 {
		return fmt.Errorf("sync: sync.kind %s cannot serve the run's weights %s again: resume with the sync.kind the run trained with",
			recipes.SyncNone, strings.Join(names, ", "))
	}
	return nil
}

// syncState is what the kinds that move weights keep.
type syncState struct {
	reps           *Replicas
	book           *weightBook
	checkpointsDir string
	dir            string
	keep           int
	// order names the weights kept, oldest first; paths maps each to its
	// unpacked directory (absolute: the servers resolve it), dirs to the
	// directory under dir it was unpacked into.
	order []string
	paths map[string]string
	dirs  map[string]string
	// uniquePaths unpacks each save under the trainer model that saved
	// it, <dir>/<model_id>/<name>, never <dir>/<name>: vLLM keys its
	// prefix cache by an adapter's name and path, so a name reloaded from
	// the same path with other weights (a rerun with --overwrite, a resume
	// training a step again: each a new trainer model) would reuse KV
	// computed with the old weights (vLLM 0.32's serving code warns
	// "Prefix-cache blocks computed with its previous weights are not
	// invalidated"). Set for sync.kind lora.
	uniquePaths bool
}

// ensureWith loads model with loadOn on every replica up that the book says
// lacks it, and fails naming every replica when none holds it afterwards.
// Weights the book does not track (the base model) need nothing.
func (s *syncState) ensureWith(ctx context.Context, model string, loadOn func(ctx context.Context, i int, model string) error) error {
	if !s.book.tracks(model) {
		return nil
	}
	if _, ok := s.paths[model]; ok {
		var lacking []int
		for _, i := range s.reps.upIndices() {
			if !s.book.has(i, model) {
				lacking = append(lacking, i)
			}
		}
		onEach(lacking, func(i int) { _ = loadOn(ctx, i, model) })
	}
	if !s.reps.holder(model) {
		return s.reps.missing(model)
	}
	return nil
}

// unpack extracts the sampler archive of tinkerPath into dir/name with
// unpackFn and records its absolute path.
func (s *syncState) unpack(tinkerPath, name string, unpackFn func(archive, dir string) (string, error)) (string, error) {
	archive, err := ArchivePath(s.checkpointsDir, tinkerPath)
	if err != nil {
		return "", fmt.Errorf("sync: %w", err)
	}
	sub := name
	if s.uniquePaths {
		model, _, _, err := trainer.SplitCheckpointPath(tinkerPath)
		if err != nil || !trainer.ValidModelID(model) {
			return "", fmt.Errorf("sync: %s: no trainer model id to unpack under", tinkerPath)
		}
		sub = filepath.Join(model, name)
	}
	if old := s.dirs[name]; old != "" && old != filepath.Join(s.dir, sub) {
		_ = os.RemoveAll(old) // an earlier unpack of the name: other weights
	}
	path, err := unpackFn(archive, filepath.Join(s.dir, sub))
	if err != nil {
		return "", fmt.Errorf("sync: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("sync: %w", err)
	}
	if s.paths == nil {
		s.paths = map[string]string{}
	}
	s.paths[name] = abs
	if s.dirs == nil {
		s.dirs = map[string]string{}
	}
	s.dirs[name] = filepath.Join(s.dir, sub)
	return abs, nil
}

// dirOf is the directory name's weights were unpacked into (under dir).
func (s *syncState) dirOf(name string) string {
	if d := s.dirs[name]; d != "" {
		return d
	}
	return filepath.Join(s.dir, name)
}

// onEach runs f on each replica index, concurrently (loading weights is
// slow: every replica loads at once).
func onEach(idx []int, f func(i int)) {
	var wg sync.WaitGroup
	for _, i := range idx {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}
