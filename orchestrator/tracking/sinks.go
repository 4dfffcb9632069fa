package tracking

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hindsearch/hindsearch/clients/tracker/mlflow"
	"github.com/hindsearch/hindsearch/clients/tracker/tensorboard"
	"github.com/hindsearch/hindsearch/clients/tracker/wandb"
)

func yamlUnmarshal(b []byte, v any) error { return yaml.Unmarshal(b, v) }

// tbSink writes TensorBoard event files into dir.
type tbSink struct {
	dir string
	// restartAt, when not -1, is the step of the SessionLog START the new
	// file starts with: a resumed run's first repeated step, or 0 for a
	// replay.
	restartAt int
	// recipe is the text summary a new run's file gets at step 0 ("" for
	// a resumed run, whose first file has it).
	recipe string
	w      *tensorboard.Writer
}

func (s *tbSink) name() string { return "tensorboard" }

func (s *tbSink) where() string {
	return "event files in " + s.dir + " (tensorboard --logdir " + s.dir + ")"
}

func (s *tbSink) open(ctx context.Context) error {
	w, err := tensorboard.Open(s.dir, s.restartAt, time.Now())
	if err != nil {
		return err
	}
	if s.recipe != "" {
		if err := w.Text(0, time.Now(), "recipe", "```yaml\n"+s.recipe+"```"); err != nil {
			w.Close()
			return err
		}
	}
	s.w = w
	return nil
}

func (s *tbSink) step(ctx context.Context, st Step) error {
	if err := s.w.Scalars(st.Step, st.At, st.Scalars); err != nil {
		return err
	}
	return s.w.Sync()
}

func (s *tbSink) files(context.Context, map[string][]byte) error { return nil }

func (s *tbSink) finish(context.Context, bool) error { return s.w.Close() }

// wandbSink writes a W&B offline run under root.
type wandbSink struct {
	root        string
	run         wandb.Run
	resumeAfter int
	w           *wandb.Writer
}

func (s *wandbSink) name() string { return "wandb (offline)" }

func (s *wandbSink) where() string {
	if s.w == nil {
		return "no offline run written"
	}
	return "offline run " + s.w.Dir() + " (upload it with `wandb sync " + s.w.Dir() + "`)"
}

func (s *wandbSink) open(ctx context.Context) error {
	w, err := wandb.Open(s.root, s.run, s.resumeAfter)
	if err != nil {
		return err
	}
	s.w = w
	return nil
}

func (s *wandbSink) step(ctx context.Context, st Step) error {
	if err := s.w.Log(st.Step, st.At, st.Scalars); err != nil {
		return err
	}
	return s.w.Sync()
}

func (s *wandbSink) files(context.Context, map[string][]byte) error { return nil }

func (s *wandbSink) finish(_ context.Context, ok bool) error {
	code := 0
	if !ok {
		code = 1
	}
	if err := s.w.Exit(code, time.Now()); err != nil {
		return err
	}
	return s.w.Close()
}

// mlflowSink logs to an MLflow server.
type mlflowSink struct {
	c          mlflow.Tracker
	experiment string // its name
	runName    string
	params     [][2]string
	tags       []mlflow.Tag
	start      time.Time
	// resumeAfter >= 0 with a run id: a resumed run's; steps the server
	// already holds (up to skipThrough) are not sent again.
	resumeAfter int
	skipThrough int
	probeKey    string

	mu     sync.Mutex
	expID  string
	runID  string
	opened bool
}

func (s *mlflowSink) name() string { return "mlflow " + s.c.URL() }

func (s *mlflowSink) where() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runID == "" {
		return "no run made"
	}
	return fmt.Sprintf("run %s of experiment %q (%s/#/experiments/%s/runs/%s)", s.runID, s.experiment, s.c.URL(), s.expID, s.runID)
}

// ids are the run's MLflow ids so far.
func (s *mlflowSink) ids() (exp, run string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expID, s.runID
}

func (s *mlflowSink) open(ctx context.Context) error {
	s.mu.Lock()
	expID, runID := s.expID, s.runID
	s.mu.Unlock()
	if runID != "" {
		// A resumed run: the server may hold steps past the resume point
		// that the killed run logged; MLflow cannot delete a metric
		// point, so those steps keep their first values (docs).
		if s.resumeAfter >= 0 && s.probeKey != "" {
			last, err := lastStep(ctx, s.c, runID, s.probeKey)
			if err != nil {
				return err
			}
			s.skipThrough = last
		}
		return s.c.UpdateRun(ctx, runID, "RUNNING", 0)
	}
	if expID == "" {
		id, err := s.c.Experiment(ctx, s.experiment)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.expID, expID = id, id
		s.mu.Unlock()
	}
	id, err := s.c.CreateRun(ctx, expID, s.runName, s.start.UnixMilli(), s.tags)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.runID = id
	s.mu.Unlock()
	ps := make([]mlflow.Param, len(s.params))
	for i, p := range s.params {
		ps[i] = mlflow.Param{Key: p[0], Value: p[1]}
	}
	return s.c.LogBatch(ctx, id, nil, ps, nil)
}

// lastStep is the highest step of key's history on the server (-1: none).
func lastStep(ctx context.Context, c mlflow.Tracker, run, key string) (int, error) {
	ms, err := c.History(ctx, run, key)
	if err != nil {
		return -1, err
	}
	last := -1
	for _, m := range ms {
		last = max(last, int(m.Step))
	}
	return last, nil
}

func (s *mlflowSink) step(ctx context.Context, st Step) error {
	if st.Step <= s.skipThrough && s.resumeAfter >= 0 && st.Step > s.resumeAfter {
		return nil
	}
	keys := make([]string, 0, len(st.Scalars))
	for k := range st.Scalars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	ms := make([]mlflow.Metric, 0, len(keys))
	for _, k := range keys {
		v := st.Scalars[k]
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		ms = append(ms, mlflow.Metric{Key: k, Value: v, Timestamp: st.At.UnixMilli(), Step: int64(st.Step)})
	}
	_, run := s.ids()
	return s.c.LogBatch(ctx, run, ms, nil, nil)
}

func (s *mlflowSink) files(ctx context.Context, files map[string][]byte) error {
	exp, run := s.ids()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := s.c.UploadArtifact(ctx, exp, run, n, files[n]); err != nil {
			return err
		}
	}
	return nil
}

func (s *mlflowSink) finish(ctx context.Context, ok bool) error {
	status := "FINISHED"
	if !ok {
		status = "FAILED"
	}
	_, run := s.ids()
	return s.c.UpdateRun(ctx, run, status, time.Now().UnixMilli())
}

// readFiles reads the named files of dir that exist (for artifacts).
func readFiles(dir string, names ...string) map[string][]byte {
	out := map[string][]byte{}
	for _, n := range names {
		if b, err := os.ReadFile(filepath.Join(dir, n)); err == nil {
			out[n] = b
		}
	}
	return out
}
