package main

import (
	"context"
	"fmt"
	"path"
	"sync"

	"github.com/spf13/cobra"

	"github.com/hindsearch/hindsearch/clients/hub"
	"github.com/hindsearch/hindsearch/clients/retriever/bm25"
	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/orchestrator/bundle"
	"github.com/hindsearch/hindsearch/orchestrator/doctor"
	"github.com/hindsearch/hindsearch/orchestrator/progress"
	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/recipes"
)

// dataFlags are the flags of data get and data verify.
type dataFlags struct {
	dir      string
	dryRun   bool
	parallel int
	progress string
}

func newDataCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "data",
		Short: "Get, check and list the data a paper run needs (Hugging Face hub bundles)",
	}
	var f dataFlags
	get := &cobra.Command{
		Use:   "get NAME...",
		Short: "Fetch the named bundles into the Hugging Face cache and make their outputs under --dir, checked",
		Long: `Fetch each named bundle (orchestrate data list) from the Hugging Face hub
as huggingface_hub does: HF_ENDPOINT (mirrors), HF_TOKEN or the token file
(gated repositories), the cache HF_HUB_CACHE (else HF_HOME/hub) in its
layout, so files huggingface-cli fetched are reused and Python tools find
these. A partial file is resumed; a large one is fetched in parallel
ranges (--parallel); an LFS file's sha256 is checked before it is moved
into place (a mismatch deletes it). The bundle's outputs (the corpus
unpacked, the index parts concatenated, a BM25 index built) go under
--dir/<bundle>, with links to the fetched files, and are checked (line
counts, parquet rows and columns, the faiss header's vector count, the BM25
index's documents). First the disk preflight: the bytes still to fetch and
to make against the space free. A second get of a complete bundle makes
only metadata requests. --dry-run stops after the plan.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runData(cmd.Context(), e, f, args, false)
		},
	}
	get.Flags().StringVar(&f.dir, "dir", "", "the data directory (default: HINDSEARCH_DATA, else ~/.cache/hindsearch/data)")
	get.Flags().BoolVar(&f.dryRun, "dry-run", false, "print the plan and the disk preflight, fetch nothing")
	get.Flags().IntVar(&f.parallel, "parallel", hub.DefaultParallel, "ranges a large file is fetched in at once (1: one stream)")
	get.Flags().StringVar(&f.progress, "progress", "auto", "progress of each file: auto (bars on a terminal, else a line every 10 s), bars, lines or off")
	verify := &cobra.Command{
		Use:   "verify [NAME...]",
		Short: "Run the named bundles' checks again on what is on disk (every bundle when none is named)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return runData(cmd.Context(), e, f, args, true)
		},
	}
	verify.Flags().StringVar(&f.dir, "dir", "", "the data directory (default: HINDSEARCH_DATA, else ~/.cache/hindsearch/data)")
	list := &cobra.Command{
		Use:   "list",
		Short: "List the bundles",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			m, err := bundle.Load()
			if err != nil {
				return err
			}
			m.Describe(e.stdout)
			return nil
		},
	}
	cmd.AddCommand(get, verify, list)
	return cmd
}

func runData(ctx context.Context, e *env, f dataFlags, names []string, verify bool) error {
	env := recipes.EnvMap(e.environ)
	m, err := bundle.Load()
	if err != nil {
		return err
	}
	if verify && len(names) == 0 {
		for n := range m.Bundles {
			names = append(names, n)
		}
	}
	bs, err := m.Resolve(names)
	if err != nil {
		return err
	}
	dir := f.dir
	if dir == "" {
		dir = bundle.DefaultDir(env)
	}
	endpoint := env["HF_ENDPOINT"]
	o := transport.DefaultOptions("hub", hub.DefaultEndpoint)
	o.Timeout = 0 // a file takes as long as it takes; dropped connections resume
	c, err := hub.New(endpoint, hub.Token(env), o)
	if err != nil {
		return err
	}
	c.Parallel = f.parallel
	var rep *progress.Reporter // nil (no progress) for verify
	if !verify {
		mode, err := progress.ParseMode(f.progress, isTerminal(e.stderr))
		if err != nil {
			return err
		}
		rep = progress.New(e.stderr, mode, 0)
		defer rep.Close()
		var mu sync.Mutex
		tasks := map[string]*progress.Task{}
		finished := map[string]bool{}
		c.Progress = func(file hub.File, done, total int64) {
			mu.Lock()
			defer mu.Unlock()
			k := file.String()
			if finished[k] {
				return // bytes fetched again after a dropped range
			}
			t := tasks[k]
			if t == nil {
				t = rep.Start(path.Base(file.Path), int(total>>20), "MB")
				tasks[k] = t
			}
			if d := done>>20 - t.Count(); d > 0 {
				t.Add(int(d))
			}
			if done >= total {
				t.Done()
				finished[k] = true
			}
		}
	}
	opts := bundle.Options{Hub: c, Cache: hub.Cache(env), Dir: dir, DryRun: f.dryRun, Free: doctor.FreeBytes, Out: e.stdout,
		BuildBM25: func(ctx context.Context, corpus, dir string) (int, error) {
			// A wiki-18 index takes minutes: show it (and that a kill
			// resumes).
			prog, endProgress, _ := setup.BM25Progress(rep, e.stderr, corpus, dir)
			ix, err := bm25.Open(ctx, corpus, dir, prog)
			endProgress()
			if err != nil {
				return 0, err
			}
			defer ix.Close()
			return ix.Len(), nil
		}}
	if verify {
		if err := bundle.Verify(ctx, bs, opts); err != nil {
			return fmt.Errorf("data verify: %w", err)
		}
		fmt.Fprintln(e.stdout, "data verify: every check passed")
		return nil
	}
	return bundle.Get(ctx, bs, opts)
}
