package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/hindsearch/hindsearch/clients/retriever/bm25"
	"github.com/hindsearch/hindsearch/orchestrator/progress"
)

func newServeCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "serve", Short: "Serve an embedded server as a process"}
	var corpus, addr, cacheDir, progressMode string
	ret := &cobra.Command{
		Use:   "retriever",
		Short: "Serve the BM25 index of a wiki-18 JSONL corpus over the Search-R1 /retrieve protocol",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if corpus == "" {
				return errors.New("--corpus FILE is required")
			}
			if cacheDir == "" {
				c, err := os.UserCacheDir()
				if err != nil {
					c = os.TempDir()
				}
				cacheDir = filepath.Join(c, "hindsearch", "bm25")
			}
			mode, err := progress.ParseMode(progressMode, isTerminal(e.stderr))
			if err != nil {
				return err
			}
			// Building the index of a full wiki-18 dump takes a while: show it.
			rep := progress.New(e.stderr, mode, 0)
			var task *progress.Task
			ix, err := bm25.Open(cmd.Context(), corpus, cacheDir, func(done, total int) {
				if task == nil {
					fmt.Fprintf(rep.Writer(), "building the BM25 index of %s (once; cached in %s)\n", corpus, cacheDir)
					task = rep.Start("BM25 index", total, "passages")
				}
				task.Add(done - int(task.Count()))
			})
			task.Done()
			rep.Close()
			if err != nil {
				return err
			}
			defer ix.Close()
			l, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("serve retriever: %w", err)
			}
			srv := &http.Server{Handler: ix.Handler(), ReadHeaderTimeout: 10 * time.Second}
			fmt.Fprintf(e.stderr, "serving %d passages of %s on http://%s (POST /retrieve)\n", ix.Len(), corpus, l.Addr())
			go func() {
				<-cmd.Context().Done()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(ctx)
			}()
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	ret.Flags().StringVar(&corpus, "corpus", "", "wiki-18 JSONL corpus ({\"id\", \"contents\"} per line)")
	ret.Flags().StringVar(&addr, "addr", "127.0.0.1:8000", "listen address")
	ret.Flags().StringVar(&cacheDir, "index-dir", "", "index cache directory (default: the user cache dir)")
	ret.Flags().StringVar(&progressMode, "progress", "auto", "index build progress on stderr: auto (a bar on a terminal, a log line every 10s otherwise), bars, lines or off")
	cmd.AddCommand(ret, newServeSimCmd(e))
	return cmd
}
