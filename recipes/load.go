package recipes

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"
)

// MaxChain is the most recipe files one base chain may layer, the loaded
// file included.
const MaxChain = 16

// BaseKey is the top-level key by which a recipe file names the recipe it
// extends (see Load). It is not a schema key: resolved recipes have no base.
const BaseKey = "base"

// Load reads the recipe file at path and returns the resolved, validated
// recipe. Settings are applied in phases, each overriding the one before:
//
//  1. the defaults (Defaults);
//  2. the base chain, then the file itself. A file may name another recipe
//     file as its base (base: other.yaml, relative to the directory of the
//     file that names it); the base is applied first, its own base before
//     it, and so on (at most MaxChain files; a cycle is an error naming the
//     chain, e.g. "a.yaml -> b.yaml -> a.yaml", and a missing base an error
//     naming the file and the line of its base key). Each file overrides
//     the ones before key by key: sections and maps (hindsight:,
//     eval.datasets, variants) merge entry by entry, lists and scalars
//     replace. In every file a key given as null keeps the value below it,
//     and unknown keys and values of the wrong type are errors naming the
//     file, the key path and the line;
//  3. environ entries named EnvPrefix + the key path in upper case with dots
//     as underscores (ORCH_TRAIN_STEPS=3, ORCH_HINDSIGHT_GOLD_ANSWER=false,
//     ORCH_POLICY_URLS=a,b, ORCH_EVAL_DATASETS_NQ=path). Callers pass
//     os.Environ(); Load reads no environment itself. An ORCH_ variable that
//     names no key is an error;
//  4. sets, in order, each "key=value" (--set on the command line), e.g.
//     train.steps=3, policy.urls=http://a:8000,http://b:8000,
//     eval.datasets.nq=data/qa/nq.jsonl.
//
// Values from the environment and from sets are text converted to the key's
// type: bools by strconv.ParseBool, ints and numbers in decimal, lists as
// comma-separated items, map entries addressed as MAP.NAME. An entry of
// eval.datasets whose path is empty is dropped, so eval.datasets.nq= (or
// nq: "" in a file) removes one, also one a base set. Keys are
// case-insensitive, and so are map entry names, which are stored in lower
// case.
//
// Then "{name}" in output.dir is replaced by the recipe name, and the path
// keys (retriever.corpus, retriever.index_dir, trainer.checkpoints_dir,
// sync.dir, train.data, eval.datasets, output.dir) are made absolute: a
// relative path from a file is relative to the directory of the file that
// sets it (a base's paths stay relative to the base); one from the defaults
// is relative to the directory of the file at path; one from the
// environment or a set is relative to the current working directory. Empty
// paths stay empty (the caller's default). Because resolved paths are
// absolute, the recipe saved by YAML (flat: no base key) loads again to the
// same Recipe from any directory.
//
// Finally the recipe is validated (Validate). Errors from a file start with
// "recipe PATH: ", or "recipe PATH (base of CHILD): " for a base; errors
// from validation start with "recipe PATH: "; a problem list is a Problems
// value (use errors.As).
func Load(path string, sets []string, environ []string) (*Recipe, error) {
	r, _, err := LoadChain(path, sets, environ)
	return r, err
}

// LoadChain is Load that also returns the recipe files it layered, in the
// order they were applied: the deepest base first and path itself last (one
// file when path names no base). Each is named as in errors: path as given,
// and each base joined to the directory of the file that names it.
func LoadChain(path string, sets []string, environ []string) (*Recipe, []string, error) {
	if path == "" {
		return nil, nil, errors.New("recipe: no file given")
	}
	cwd, err := os.Getwd()
	if err != nil {
		return nil, nil, fmt.Errorf("recipe: working directory: %w", err)
	}
	layers, err := readChain(path)
	if err != nil {
		return nil, nil, err
	}
	top := layers[0]
	// Each file is checked on its own, so that a problem names its file and
	// line; the loaded file first, as it is the one most likely edited.
	for _, l := range layers {
		if probs := checkLayer(l); len(probs) > 0 {
			return nil, nil, fmt.Errorf("%s: %w", l.label(), probs)
		}
	}

	fields := schema()
	v := viper.New()
	def := Defaults()
	dv := reflect.ValueOf(def)
	for _, f := range fields {
		if f.typ.Kind() == reflect.Map {
			continue // entries only; an empty map default adds no key
		}
		v.SetDefault(f.key, dv.FieldByIndex(f.index).Interface())
	}
	files := make([]string, 0, len(layers))
	for _, l := range slices.Backward(layers) {
		absPaths(l.cfg, l.dir)
		if err := v.MergeConfigMap(l.cfg); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", l.label(), err)
		}
		files = append(files, l.path)
	}

	overridden := map[string]bool{}
	if err := applyEnv(v, fields, environ, overridden); err != nil {
		return nil, nil, err
	}
	for _, s := range sets {
		key, val, ok := strings.Cut(s, "=")
		if !ok {
			return nil, nil, fmt.Errorf("--set %s: want key=value", s)
		}
		if err := override(v, fields, key, val, overridden); err != nil {
			return nil, nil, fmt.Errorf("--set %s: %w", s, err)
		}
	}

	var r Recipe
	if err := v.UnmarshalExact(&r, decoderConfig); err != nil {
		// Every file passed checkLayer and overrides are converted by key
		// type, so this is not expected; name the key all the same.
		probs := decodeProblems(err, v.AllSettings())
		for i := range probs {
			probs[i].Line = lineOf(top.root, splitName(probs[i].Key))
		}
		return nil, nil, fmt.Errorf("%s: %w", top.label(), probs)
	}

	normalize(&r)
	resolvePaths(&r, top.dir, cwd, overridden, DataDir(EnvMap(environ)))
	if err := r.loadEndpoints(); err != nil {
		return nil, nil, fmt.Errorf("recipe %s: %w", path, err)
	}
	if err := r.Validate(); err != nil {
		return nil, nil, fmt.Errorf("recipe %s: %w", path, err)
	}
	return &r, files, nil
}

// decoderConfig makes the decoder strict: no weak conversions, and no
// truncation of numbers into ints.
func decoderConfig(c *mapstructure.DecoderConfig) {
	c.WeaklyTypedInput = false
	c.DecodeHook = strictIntHook
}

// layer is one recipe file of a base chain.
type layer struct {
	path  string         // as named: as given to Load, or base joined to the naming file's directory
	dir   string         // the file's directory, absolute
	child string         // the file that names this one as its base ("" for the loaded file)
	root  *yaml.Node     // the parsed file, for line numbers
	cfg   map[string]any // the file's keys, nulls and the base key removed
}

// label starts every error about the layer's file.
func (l *layer) label() string {
	if l.child == "" {
		return "recipe " + l.path
	}
	return fmt.Sprintf("recipe %s (base of %s)", l.path, l.child)
}

// readChain reads the file at path and its base chain, the file first and
// the deepest base last.
func readChain(path string) ([]*layer, error) {
	var layers []*layer
	seen := map[string]bool{} // absolute paths read so far
	next, child, baseLine := path, "", 0
	for {
		absPath, err := filepath.Abs(next)
		if err != nil {
			return nil, fmt.Errorf("recipe %s: %w", next, err)
		}
		names := func() string {
			var b strings.Builder
			for _, l := range layers {
				b.WriteString(l.path + " -> ")
			}
			return b.String() + next
		}
		if seen[absPath] {
			return nil, fmt.Errorf("%s: base: cycle %s (line %d)", layers[len(layers)-1].label(), names(), baseLine)
		}
		if len(layers) == MaxChain {
			return nil, fmt.Errorf("%s: base: more than %d files in the chain %s (line %d)", layers[len(layers)-1].label(), MaxChain, names(), baseLine)
		}
		seen[absPath] = true
		if child != "" {
			// A base must be a file: reading a device or a pipe could block.
			if st, err := os.Stat(next); err == nil && !st.Mode().IsRegular() {
				return nil, fmt.Errorf("%s: base %s: not a regular file (line %d)", layers[len(layers)-1].label(), next, baseLine)
			}
		}
		data, err := os.ReadFile(next)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			if child == "" {
				return nil, fmt.Errorf("recipe %s: %w", next, err)
			}
			return nil, fmt.Errorf("%s: base %s: %w (line %d)", layers[len(layers)-1].label(), next, err, baseLine)
		}
		l := &layer{path: next, dir: filepath.Dir(absPath), child: child}
		if l.root, l.cfg, err = parseYAML(data); err != nil {
			return nil, fmt.Errorf("%s: %w", l.label(), err)
		}
		layers = append(layers, l)
		base, line, prob := takeBase(l.cfg, l.root)
		if prob != nil {
			return nil, fmt.Errorf("%s: %w", l.label(), Problems{*prob})
		}
		if base == "" {
			return layers, nil
		}
		if !filepath.IsAbs(base) {
			base = filepath.Join(filepath.Dir(next), base)
		}
		next, child, baseLine = filepath.Clean(base), next, line
	}
}

// takeBase removes the base key from a file's keys and returns its value
// and line ("" when the file has none), or the problem with it.
func takeBase(cfg map[string]any, root *yaml.Node) (string, int, *Problem) {
	var keys []string
	for k := range cfg {
		if strings.EqualFold(k, BaseKey) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "", 0, nil
	}
	line := lineOf(root, []string{BaseKey})
	if len(keys) > 1 {
		return "", 0, &Problem{Key: BaseKey, Message: "given more than once", Line: line}
	}
	val := cfg[keys[0]]
	delete(cfg, keys[0])
	s, ok := val.(string)
	switch {
	case !ok:
		return "", 0, &Problem{Key: BaseKey, Message: (&typeError{want: "string", got: val}).Error(), Line: line}
	case strings.TrimSpace(s) == "":
		return "", 0, &Problem{Key: BaseKey, Message: "must name a recipe file", Line: line}
	}
	return s, line, nil
}

// checkLayer returns the problems of one file's keys on their own: values
// that should be sections or maps and are not, unknown keys and values of
// the wrong type, each with its line.
func checkLayer(l *layer) Problems {
	if probs := checkSections(l.cfg, l.root); len(probs) > 0 {
		return probs
	}
	v := viper.New()
	if err := v.MergeConfigMap(copyMap(l.cfg)); err != nil {
		return Problems{{Message: err.Error()}}
	}
	var r Recipe
	err := v.UnmarshalExact(&r, decoderConfig)
	if err == nil {
		return nil
	}
	probs := decodeProblems(err, v.AllSettings())
	for i := range probs {
		probs[i].Line = lineOf(l.root, splitName(probs[i].Key))
	}
	sort.SliceStable(probs, func(i, j int) bool { return probs[i].Line < probs[j].Line })
	return probs
}

// copyMap returns a deep copy of the maps and lists in m (viper lower-cases
// and merges maps in place).
func copyMap(m map[string]any) map[string]any {
	return stripNulls(m).(map[string]any)
}

// absPaths makes the relative paths a file sets absolute against the
// file's directory dir, in place: the path keys of resolvePaths, found
// case-insensitively. Values of the wrong type are left for the decoder.
func absPaths(cfg map[string]any, dir string) {
	var key string
	abs := func(v any) any {
		s, ok := v.(string)
		if !ok || s == "" || filepath.IsAbs(s) || (key == "policy.tokenizer" || key == "judge.tokenizer") && isTokenizerName(s) || strings.HasPrefix(s, DataPrefix) ||
			key == "eval.subset" && isSubsetName(s) {
			return v
		}
		return filepath.Join(dir, s)
	}
	for _, key = range []string{"policy.tokenizer", "policy.endpoints_file", "judge.tokenizer", "retriever.corpus", "retriever.index_dir", "trainer.checkpoints_dir", "sync.dir", "output.dir", "train.data", "eval.datasets", "eval.subset"} {
		section, leaf, _ := strings.Cut(key, ".")
		for sk, sv := range cfg {
			sm, ok := sv.(map[string]any)
			if !ok || !strings.EqualFold(sk, section) {
				continue
			}
			for lk, lv := range sm {
				if !strings.EqualFold(lk, leaf) {
					continue
				}
				switch x := lv.(type) {
				case []any: // train.data
					for i := range x {
						x[i] = abs(x[i])
					}
				case map[string]any: // eval.datasets
					for name := range x {
						x[name] = abs(x[name])
					}
				default:
					sm[lk] = abs(lv)
				}
			}
		}
	}
}

// parseYAML parses a recipe file into its node tree (for line numbers) and
// a map with null values removed (so that they keep their defaults).
func parseYAML(data []byte) (*yaml.Node, map[string]any, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, nil, errors.New(yamlMessage(err))
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return &doc, map[string]any{}, nil // empty file: all defaults
	}
	top := doc.Content[0]
	if top.Kind == yaml.ScalarNode && top.Tag == "!!null" {
		return &doc, map[string]any{}, nil
	}
	if top.Kind != yaml.MappingNode {
		return nil, nil, fmt.Errorf("line %d: want a map of keys at the top level", top.Line)
	}
	var m map[string]any
	if err := top.Decode(&m); err != nil {
		return nil, nil, errors.New(yamlMessage(err))
	}
	return &doc, stripNulls(m).(map[string]any), nil
}

// yamlMessage shortens a YAML error to its "line N: ..." message(s).
func yamlMessage(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return strings.Join(te.Errors, "; ")
	}
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

// stripNulls removes null values from maps, recursively, and gives every
// map string keys.
func stripNulls(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if e != nil {
				out[k] = stripNulls(e)
			}
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if e != nil {
				out[fmt.Sprint(k)] = stripNulls(e)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = stripNulls(e)
		}
		return out
	}
	return v
}

// checkSections reports file values that should be maps (sections such as
// train:, and map keys such as eval.datasets) but are not. Viper would
// otherwise let such a value shadow the defaults below it.
func checkSections(cfg map[string]any, root *yaml.Node) Problems {
	var probs Problems
	var walk func(m map[string]any, t reflect.Type, prefix string)
	walk = func(m map[string]any, t reflect.Type, prefix string) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			name := k
			if prefix != "" {
				name = prefix + "." + k
			}
			ft := childType(t, k)
			if ft == nil || (ft.Kind() != reflect.Struct && ft.Kind() != reflect.Map) {
				continue // unknown keys and leaves: the decoder reports them
			}
			sub, ok := m[k].(map[string]any)
			if !ok {
				probs = append(probs, Problem{
					Key:     name,
					Message: (&typeError{want: typeName(ft), got: m[k]}).Error(),
					Line:    lineOf(root, splitName(name)),
				})
				continue
			}
			if ft.Kind() == reflect.Struct {
				walk(sub, ft, name)
			}
		}
	}
	walk(cfg, reflect.TypeOf(Recipe{}), "")
	return probs
}

// applyEnv applies every EnvPrefix entry of environ.
func applyEnv(v *viper.Viper, fields []field, environ []string, overridden map[string]bool) error {
	byEnv := make(map[string]string, len(fields))
	for _, f := range fields {
		byEnv[EnvName(f.key)] = f.key
	}
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, EnvPrefix) {
			continue
		}
		key, ok := byEnv[name]
		if !ok {
			// A map entry: the longest map key whose variable prefixes name.
			for _, f := range fields {
				p := EnvName(f.key) + "_"
				if f.typ.Kind() == reflect.Map && strings.HasPrefix(name, p) && len(name) > len(p) {
					key = f.key + "." + strings.ToLower(name[len(p):])
					ok = true
				}
			}
		}
		if !ok {
			return fmt.Errorf("environment %s: no recipe key of that name", name)
		}
		if err := override(v, fields, key, val, overridden); err != nil {
			return fmt.Errorf("environment %s: %w", name, err)
		}
	}
	return nil
}

// override sets key (a leaf key path, or MAP.NAME for a map entry) to the
// text val converted to the key's type, in viper's override layer.
func override(v *viper.Viper, fields []field, key, val string, overridden map[string]bool) error {
	key = strings.ToLower(strings.TrimSpace(key))
	for _, f := range fields {
		if key == f.key {
			if f.typ.Kind() == reflect.Map {
				return fmt.Errorf("%s is a map: set one entry as %s.NAME=VALUE", key, key)
			}
			x, err := parseValue(f.typ, val)
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			v.Set(key, x)
			overridden[key] = true
			return nil
		}
		entry, isEntry := strings.CutPrefix(key, f.key+".")
		if f.typ.Kind() == reflect.Map && isEntry && entry != "" {
			if strings.Contains(entry, ".") {
				return fmt.Errorf("%s: entry name %q contains a dot", f.key, entry)
			}
			x, err := parseValue(f.typ.Elem(), val)
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			v.Set(key, x)
			overridden[key] = true
			return nil
		}
	}
	return fmt.Errorf("unknown recipe key %q", key)
}

// strictIntHook rejects numbers with a fraction for int keys (the decoder
// would truncate them).
func strictIntHook(from, to reflect.Type, data any) (any, error) {
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if from.Kind() == reflect.Float64 || from.Kind() == reflect.Float32 {
			f := reflect.ValueOf(data).Float()
			if f != math.Trunc(f) || !(f >= math.MinInt64 && f < math.MaxInt64) {
				return nil, &typeError{want: typeName(to), got: data}
			}
		}
	}
	return data, nil
}

// msgUnknownKey is the Message of a Problem for a key the schema lacks.
const msgUnknownKey = "unknown key"

// decodeProblems rewrites the decoder's errors into Problems naming key
// paths: the decoder says "'hindsight' has invalid keys: gold_anwser" and
// "'train.steps' expected type 'int', got unconvertible type 'string'".
func decodeProblems(err error, settings map[string]any) Problems {
	var probs Problems
	var walk func(err error)
	walk = func(err error) {
		de, ok := err.(*mapstructure.DecodeError)
		if !ok {
			switch x := err.(type) {
			case interface{ Unwrap() []error }:
				for _, e := range x.Unwrap() {
					walk(e)
				}
			case interface{ Unwrap() error }:
				walk(x.Unwrap())
			default:
				probs = append(probs, Problem{Message: err.Error()})
			}
			return
		}
		name, inner := de.Name(), de.Unwrap()
		if keys, ok := strings.CutPrefix(inner.Error(), "has invalid keys: "); ok {
			for k := range strings.SplitSeq(keys, ", ") {
				full := k
				if name != "" {
					full = name + "." + k
				}
				probs = append(probs, Problem{Key: displayKey(full), Message: msgUnknownKey})
			}
			return
		}
		p := Problem{Key: displayKey(name), Message: inner.Error()}
		if t, ok := typeAt(name); ok {
			p.Message = (&typeError{want: typeName(t), got: badValue(inner, settings, name)}).Error()
		}
		probs = append(probs, p)
	}
	walk(err)
	return probs
}

// badValue returns the value the decoder rejected.
func badValue(inner error, settings map[string]any, name string) any {
	var ut *mapstructure.UnconvertibleTypeError
	var pe *mapstructure.ParseError
	var te *typeError
	switch {
	case errors.As(inner, &ut):
		return ut.Value
	case errors.As(inner, &pe):
		return pe.Value
	case errors.As(inner, &te):
		return te.got
	}
	var cur any = settings
	for _, seg := range splitName(name) {
		switch x := cur.(type) {
		case map[string]any:
			cur = x[seg]
		case []any:
			i := 0
			if _, err := fmt.Sscan(seg, &i); err != nil || i < 0 || i >= len(x) {
				return nil
			}
			cur = x[i]
		default:
			return nil
		}
	}
	return cur
}

// lineOf returns the line of the key (or list item) at segs in the YAML
// tree, or 0 when it is not there.
func lineOf(doc *yaml.Node, segs []string) int {
	if doc == nil || len(doc.Content) == 0 || len(segs) == 0 {
		return 0
	}
	n := doc.Content[0]
	line := 0
	for _, seg := range segs {
		for n.Kind == yaml.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		switch n.Kind {
		case yaml.MappingNode:
			var next *yaml.Node
			for i := 0; i+1 < len(n.Content); i += 2 {
				if strings.EqualFold(n.Content[i].Value, seg) {
					line, next = n.Content[i].Line, n.Content[i+1]
				}
			}
			if next == nil {
				return 0
			}
			n = next
		case yaml.SequenceNode:
			i := -1
			if _, err := fmt.Sscan(seg, &i); err != nil || i < 0 || i >= len(n.Content) {
				return 0
			}
			n = n.Content[i]
			line = n.Line
		default:
			return 0
		}
	}
	return line
}

// normalize gives nil lists and maps their empty values and drops
// eval.datasets entries with an empty path.
func normalize(r *Recipe) {
	if r.Policy.URLs == nil {
		r.Policy.URLs = []string{}
	}
	if r.Train.Data == nil {
		r.Train.Data = []string{}
	}
	if r.Eval.Datasets == nil {
		r.Eval.Datasets = map[string]string{}
	}
	maps.DeleteFunc(r.Eval.Datasets, func(_, p string) bool { return p == "" })
}

// isTokenizerName reports whether a policy.tokenizer value names a
// tokenizer rather than a file (auto, sim): it is not a path to resolve.
func isTokenizerName(s string) bool {
	return s == TokenizerAuto || s == TokenizerSim || s == TokenizerQwen25 || s == TokenizerQwen3
}

// resolvePaths substitutes {name} in output.dir and makes every non-empty
// path absolute: against cwd for overridden keys, else against fileDir.
func resolvePaths(r *Recipe, fileDir, cwd string, overridden map[string]bool, dataDir string) {
	abs := func(key, p string) string {
		if p == "" || (key == "policy.tokenizer" || key == "judge.tokenizer") && isTokenizerName(p) {
			return p
		}
		if ref, ok := strings.CutPrefix(p, DataPrefix); ok {
			// A file of a bundle of `orchestrate data get`: under the
			// data directory, in the bundle's folder.
			bundle, _, _ := strings.Cut(ref, "/")
			full := filepath.Join(dataDir, filepath.FromSlash(ref))
			if r.dataRefs == nil {
				r.dataRefs = map[string]string{}
			}
			r.dataRefs[full] = bundle
			return full
		}
		if filepath.IsAbs(p) {
			return filepath.Clean(p)
		}
		if overridden[key] {
			return filepath.Join(cwd, p)
		}
		return filepath.Join(fileDir, p)
	}
	r.Policy.Tokenizer = abs("policy.tokenizer", r.Policy.Tokenizer)
	r.Policy.EndpointsFile = abs("policy.endpoints_file", r.Policy.EndpointsFile)
	r.Judge.Tokenizer = abs("judge.tokenizer", r.Judge.Tokenizer)
	r.Retriever.Corpus = abs("retriever.corpus", r.Retriever.Corpus)
	r.Retriever.IndexDir = abs("retriever.index_dir", r.Retriever.IndexDir)
	r.Trainer.CheckpointsDir = abs("trainer.checkpoints_dir", r.Trainer.CheckpointsDir)
	r.Tracking.WandB.Dir = abs("tracking.wandb.dir", r.Tracking.WandB.Dir)
	r.Sync.Dir = abs("sync.dir", r.Sync.Dir)
	r.Eval.SubsetFiles = nil
	if s := r.Eval.Subset; !isSubsetName(s) {
		r.Eval.Subset = abs("eval.subset", s)
	} else if s == SubsetRand1000 {
		r.Eval.SubsetFiles = map[string]string{}
		for name := range r.Eval.Datasets {
			if _, ok := SearchR1TestSizes[name]; ok {
				r.Eval.SubsetFiles[name] = abs("eval.subset", DataPrefix+Rand1000Bundle+"/"+name+".jsonl")
			}
		}
	}
	for i, p := range r.Train.Data {
		r.Train.Data[i] = abs("train.data", p)
	}
	for name, p := range r.Eval.Datasets {
		r.Eval.Datasets[name] = abs("eval.datasets."+name, p)
	}
	r.Output.Dir = abs("output.dir", strings.ReplaceAll(r.Output.Dir, NamePlaceholder, r.Name))
}

// DataPrefix starts a path value that names a file of a data bundle
// (`orchestrate data get`): data:<bundle>/<file>, read under the data
// directory (DataDir).
const DataPrefix = "data:"

// DataDir is the data directory `orchestrate data get` writes and data:
// paths are read from: HINDSEARCH_DATA, else XDG_CACHE_HOME/hindsearch/
// data, else ~/.cache/hindsearch/data.
func DataDir(env map[string]string) string {
	if d := env["HINDSEARCH_DATA"]; d != "" {
		return d
	}
	if x := env["XDG_CACHE_HOME"]; x != "" {
		return filepath.Join(x, "hindsearch", "data")
	}
	if h := env["HOME"]; h != "" {
		return filepath.Join(h, ".cache", "hindsearch", "data")
	}
	if c, err := os.UserCacheDir(); err == nil {
		return filepath.Join(c, "hindsearch", "data")
	}
	return filepath.Join(os.TempDir(), "hindsearch", "data")
}

// EnvMap is environ's KEY=VALUE pairs as a map.
func EnvMap(environ []string) map[string]string {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}
