// Package bundle gets the named data bundles a paper run needs
// (`orchestrate data get`): the hub files of each (manifest.yaml) into the
// Hugging Face cache, what is made of them (a corpus unpacked, index parts
// concatenated, a BM25 index built) under one data directory, and the
// checks that say the result is whole (line counts, parquet rows and
// columns, a faiss header's vector count, the BM25 index's documents).
package bundle

import (
	_ "embed"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/hindsearch/hindsearch/clients/hub"
	"github.com/hindsearch/hindsearch/recipes"
)

//go:embed manifest.yaml
var manifestYAML []byte

// Manifest is the set of named bundles.
type Manifest struct {
	Bundles map[string]Bundle `yaml:"bundles"`
}

// Bundle is one named set of files.
type Bundle struct {
	// About says what it is, in a line.
	About string `yaml:"about"`
	// Files are the hub files it holds.
	Files []FileSpec `yaml:"files"`
	// Make are the steps that make its outputs from the files.
	Make []Step `yaml:"make"`
	// Checks say the bundle is whole.
	Checks []Check `yaml:"checks"`
	// Needs are the bundles it is made of, or needs first.
	Needs []string `yaml:"needs"`
}

// FileSpec is one hub file of a bundle.
type FileSpec struct {
	Repo     string `yaml:"repo"`
	Type     string `yaml:"type"`
	Revision string `yaml:"revision"`
	Path     string `yaml:"path"`
	// As is its name in the bundle's directory (default: its base name).
	As string `yaml:"as"`
}

func (f FileSpec) name() string {
	if f.As != "" {
		return f.As
	}
	return filepath.Base(f.Path)
}

func (f FileSpec) file() hub.File {
	return hub.File{Repo: f.Repo, Type: f.Type, Revision: f.Revision, Path: f.Path}
}

// Step makes To (in the bundle's directory) from From: gunzip (one gzip
// file), concat (parts in order) or bm25 (an index of a corpus, From
// naming "<bundle>/<file>"). Size is the output's expected bytes, for the
// disk preflight (0: unknown).
type Step struct {
	Kind string   `yaml:"kind"`
	From []string `yaml:"from"`
	To   string   `yaml:"to"`
	Size int64    `yaml:"size"`
}

// Check holds a file of the bundle to what it must be: lines (a JSONL
// file's line count), parquet (rows, columns), questions (a question
// file the loader reads, with Questions of them), faiss (the index header's vector count), bm25
// (the index's document count). A zero count checks only that there are
// some.
type Check struct {
	Kind    string   `yaml:"kind"`
	File    string   `yaml:"file"`
	Lines   int64    `yaml:"lines"`
	Rows    int64    `yaml:"rows"`
	Columns []string `yaml:"columns"`
	Vectors int64    `yaml:"vectors"`
	Docs    int64    `yaml:"docs"`
	// Questions is a questions check's count.
	Questions int `yaml:"questions"`
}

// Load reads the shipped manifest.
func Load() (*Manifest, error) {
	return Parse(manifestYAML)
}

// Parse reads a manifest, checking that every bundle a bundle needs
// exists and every step and check is of a known kind.
func Parse(b []byte) (*Manifest, error) {
	var m Manifest
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("bundle manifest: %w", err)
	}
	for name, b := range m.Bundles {
		for _, n := range b.Needs {
			if _, ok := m.Bundles[n]; !ok && !strings.HasPrefix(n, TokenizerPrefix) {
				return nil, fmt.Errorf("bundle manifest: %s needs %q, which is not a bundle", name, n)
			}
		}
		for _, f := range b.Files {
			if f.Repo == "" || f.Path == "" || (f.Type != hub.Model && f.Type != hub.Dataset) {
				return nil, fmt.Errorf("bundle manifest: %s: file %+v: want a repo, a path and type model or dataset", name, f)
			}
		}
		for _, s := range b.Make {
			if !slices.Contains([]string{"gunzip", "concat", "bm25"}, s.Kind) {
				return nil, fmt.Errorf("bundle manifest: %s: step kind %q", name, s.Kind)
			}
		}
		for _, c := range b.Checks {
			if !slices.Contains([]string{"lines", "parquet", "questions", "faiss", "bm25"}, c.Kind) {
				return nil, fmt.Errorf("bundle manifest: %s: check kind %q", name, c.Kind)
			}
		}
	}
	return &m, nil
}

// TokenizerPrefix names a model's tokenizer bundle: "tokenizer:ORG/NAME"
// is that model repository's tokenizer.json, tokenizer_config.json and
// generation_config.json, into the Hugging Face cache only (where
// policy.tokenizer auto finds it).
const TokenizerPrefix = "tokenizer:"

// Named is a bundle with its name.
type Named struct {
	Name string
	Bundle
}

// Resolve expands names (and what they need, first) into the bundles to
// get, each once, in order.
func (m *Manifest) Resolve(names []string) ([]Named, error) {
	var out []Named
	seen := map[string]bool{}
	var add func(n string, via []string) error
	add = func(n string, via []string) error {
		if seen[n] {
			return nil
		}
		if slices.Contains(via, n) {
			return fmt.Errorf("bundle %s needs itself (%s)", n, strings.Join(append(via, n), " -> "))
		}
		if model, ok := strings.CutPrefix(n, TokenizerPrefix); ok {
			if strings.Count(model, "/") != 1 {
				return fmt.Errorf("bundle %q: want tokenizer:ORG/NAME", n)
			}
			seen[n] = true
			var files []FileSpec
			for _, p := range []string{"tokenizer.json", "tokenizer_config.json", "generation_config.json"} {
				files = append(files, FileSpec{Repo: model, Type: hub.Model, Path: p})
			}
			out = append(out, Named{Name: n, Bundle: Bundle{About: model + "'s tokenizer", Files: files}})
			return nil
		}
		b, ok := m.Bundles[n]
		if !ok {
			return fmt.Errorf("no bundle %q (there are %s, and tokenizer:ORG/NAME)", n, strings.Join(m.names(), ", "))
		}
		for _, dep := range b.Needs {
			if err := add(dep, append(via, n)); err != nil {
				return err
			}
		}
		seen[n] = true
		out = append(out, Named{Name: n, Bundle: b})
		return nil
	}
	for _, n := range names {
		if err := add(n, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (m *Manifest) names() []string {
	var ns []string
	for n := range m.Bundles {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

// Describe writes one line per bundle: its name and what it is.
func (m *Manifest) Describe(w io.Writer) {
	for _, n := range m.names() {
		b := m.Bundles[n]
		fmt.Fprintf(w, "%-16s %s\n", n, b.About)
	}
	fmt.Fprintf(w, "%-16s %s\n", "tokenizer:ORG/NAME", "a model's tokenizer.json, tokenizer_config.json and generation_config.json (into the Hugging Face cache)")
}

// DefaultDir is the data directory when --dir is not given, where a
// recipe's data: paths are read (recipes.DataDir): HINDSEARCH_DATA, else
// ~/.cache/hindsearch/data.
func DefaultDir(env map[string]string) string {
	return recipes.DataDir(env)
}

// exists reports whether p exists (a link is followed).
func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
