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
	"github.com/hindsearch/hindsearch/orchestrator/setup"
)

func newServeCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "serve", Short: "Serve an embedded server as a process"}
	var corpus, addr, cacheDir, progressMode, styleName string
	var params bm25.Params
	ret := &cobra.Command{
		Use:   "retriever",
		Short: "Serve the BM25 index of a wiki-18 JSONL corpus over the Search-R1 /retrieve protocol",
		Long: `Serve the BM25 index of a wiki-18 JSONL corpus as Search-R1's retrieval_server.py
does: POST /retrieve only, default top-k 3, port 8000, and its failures (a request
without "return_scores": true fails 500 unless it has exactly two queries).

--style picks the document shape: dense (the default) answers the corpus row
{"id", "contents"}, as the e5 server does; bm25 answers {"title", "text",
"contents"} with no id, as the BM25 server over a pyserini index storing raw
documents does.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if corpus == "" {
				return errors.New("--corpus FILE is required")
			}
			style, err := bm25.ParseStyle(styleName)
			if err != nil {
				return fmt.Errorf("--style: %w", err)
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
			prog, endProgress, _ := setup.BM25Progress(rep, rep.Writer(), corpus, cacheDir)
			ix, err := bm25.OpenWith(cmd.Context(), corpus, cacheDir, params, prog)
			endProgress()
			rep.Close()
			if err != nil {
				return err
			}
			defer ix.Close()
			l, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("serve retriever: %w", err)
			}
			srv := &http.Server{Handler: ix.Handler(style), ReadHeaderTimeout: 10 * time.Second}
			fmt.Fprintf(e.stderr, "serving %d passages of %s on http://%s (POST /retrieve, %s style)\n", ix.Len(), corpus, l.Addr(), style)
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
	ret.Flags().StringVar(&addr, "addr", fmt.Sprintf("127.0.0.1:%d", bm25.DefaultPort), "listen address (Search-R1's port; it listens on 0.0.0.0)")
	ret.Flags().StringVar(&styleName, "style", string(bm25.StyleDense), "document shape: dense ({id, contents}, as the e5 server) or bm25 ({title, text, contents}, no id, as the BM25 server)")
	ret.Flags().StringVar(&cacheDir, "index-dir", "", "index cache directory (default: the user cache dir)")
	ret.Flags().Float64Var(&params.K1, "k1", bm25.PyseriniParams.K1, "BM25 k1 (Pyserini's default); each k1, b pair is its own index")
	ret.Flags().Float64Var(&params.B, "b", bm25.PyseriniParams.B, "BM25 b (Pyserini's default)")
	ret.Flags().StringVar(&progressMode, "progress", "auto", "index build progress on stderr: auto (a bar on a terminal, a log line every 10s otherwise), bars, lines or off")
	cmd.AddCommand(ret, newServeSimCmd(e))
	return cmd
}
