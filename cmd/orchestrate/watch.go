package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/pflag"

	"github.com/hindsearch/hindsearch/orchestrator/metrics"
	"github.com/hindsearch/hindsearch/orchestrator/progress"
	"github.com/hindsearch/hindsearch/orchestrator/setup"
)

// watchFlags are the flags that let a user watch a long command: how its
// progress is shown, and where its Prometheus metrics are served.
type watchFlags struct {
	progress    string
	metricsAddr string
}

func (w *watchFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&w.progress, "progress", "auto", "progress display: auto (bars on a terminal, a log line every 10s otherwise), bars, lines or off")
	fs.StringVar(&w.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on HOST:PORT at /metrics while the command runs (e.g. 127.0.0.1:9464)")
}

// watch is a started set of watch services.
type watch struct {
	// out is where the command's ordinary lines go (above any bars).
	out      io.Writer
	progress *progress.Reporter
	metrics  *metrics.Metrics
	srv      *http.Server
	served   chan struct{}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// start sets up progress on e.stdout and, with --metrics-addr, the metrics
// server (its address is printed to e.stderr). Close the watch when done.
func (w *watchFlags) start(e *env) (*watch, error) {
	mode, err := progress.ParseMode(w.progress, isTerminal(e.stdout))
	if err != nil {
		return nil, err
	}
	rep := progress.New(e.stdout, mode, 0)
	wa := &watch{out: rep.Writer(), progress: rep, metrics: metrics.New()}
	if w.metricsAddr != "" {
		l, err := net.Listen("tcp", w.metricsAddr)
		if err != nil {
			rep.Close()
			return nil, fmt.Errorf("--metrics-addr %s: %w", w.metricsAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", wa.metrics.Handler())
		wa.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		wa.served = make(chan struct{})
		go func() {
			defer close(wa.served)
			if err := wa.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				fmt.Fprintf(e.stderr, "metrics server: %v\n", err)
			}
		}()
		fmt.Fprintf(e.stderr, "metrics on http://%s/metrics\n", l.Addr())
	}
	return wa, nil
}

// Close stops the metrics server and removes the progress bars.
func (wa *watch) Close() {
	if wa.srv != nil {
		_ = wa.srv.Close()
		<-wa.served
	}
	wa.progress.Close()
}

// options are the Connect options that report to the watch.
func (wa *watch) options() []setup.Option {
	return []setup.Option{setup.WithMetrics(wa.metrics), setup.WithProgress(wa.progress)}
}
