package real_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/tracker/wandb"
	"github.com/hindsearch/hindsearch/results"
)

// trackerBin is the bin directory of the trackers' environment `make
// trackers` installed (HINDSEARCH_TRACKERS_BIN); the test skips without it.
func trackerBin(t *testing.T) string {
	t.Helper()
	return installed(t, "HINDSEARCH_TRACKERS_BIN", "the trackers' readers are not installed: make trackers (sim/real/README.md) sets HINDSEARCH_TRACKERS_BIN")
}

// installed is the path an opt-in make target put in the environment
// variable env; without it the test skips, saying why.
func installed(t *testing.T, env, why string) string {
	t.Helper()
	bin := os.Getenv(env)
	if bin == "" {
		t.Skip(why)
	}
	return bin
}

// mlflowServer starts `mlflow server` on a free loopback port with its
// database and artifacts in a temporary directory, stopped (its process
// group) when the test ends.
func mlflowServer(t *testing.T, bin string) string {
	t.Helper()
	port := freePort(t)
	dir := t.TempDir()
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	startServer(t, "mlflow server", url+"/health", 3*time.Minute, 20*time.Second, filepath.Join(bin, "mlflow"), "server", "--host", "127.0.0.1", "--port", fmt.Sprint(port),
		"--backend-store-uri", "sqlite:///"+filepath.Join(dir, "mlflow.db"), "--artifacts-destination", filepath.Join(dir, "artifacts"), "--workers", "1")
	return url
}

// startServer starts name (argv) in a process group of its own, stopped
// when the test ends (SIGTERM, then SIGKILL after grace), and waits up to
// within for ready to answer 200; it fails the test with the server's
// output when it does not.
func startServer(t *testing.T, name, ready string, within, grace time.Duration, argv ...string) {
	t.Helper()
	var log bytes.Buffer
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(grace):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if resp, err := http.Get(ready); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
	}
	t.Fatalf("%s did not come up:\n%s", name, log.String())
}

// readBack runs trackers_read.py KIND ARGS in the trackers' environment
// and decodes its JSON.
func readBack(t *testing.T, bin string, out any, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "python"), append([]string{filepath.Join(repoRoot(t), "sim", "real", "trackers_read.py")}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("trackers_read.py %v: %v\n%s", args, err, stderr.String())
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("trackers_read.py %v: %v", args, err)
	}
}

// wandbRecords reads an offline run's log with the wandb client's own
// reader (`wandb leet inspect --json`: wandb-core's transaction-log reader).
func wandbRecords(t *testing.T, bin, file string) []map[string]any {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "wandb"), "leet", "inspect", "--json", file)
	cmd.Env = append(os.Environ(), "WANDB_MODE=offline", "WANDB_SILENT=true")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("wandb leet inspect --json %s: %v\n%s", file, err, stderr.String())
	}
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("wandb leet inspect: %q: %v", line, err)
		}
		recs = append(recs, m)
	}
	return recs
}

// TestTrackersKillAndResume runs the demo with every tracker on
// (TensorBoard, a W&B offline run, an MLflow server started here),
// checkpointing every 2 steps, kills it with SIGKILL once step 5 is
// recorded and every tracker has it (so step 5 is run again after the
// resume from step 4's state), resumes it, and reads what each tracker
// holds back with the tracker's own library: every step once, with the
// values of steps.jsonl (float32 in TensorBoard), the evaluations, the
// recipe, one W&B run (the id in state.json) with an exit, one MLflow run
// (the id in state.json) finished with its params and artifacts.
func TestTrackersKillAndResume(t *testing.T) {
	bin := trackerBin(t)
	uri := mlflowServer(t, bin)
	dir := filepath.Join(t.TempDir(), "run")
	sets := []string{"output.dir=" + dir, "train.steps=6", "eval.every=3", "checkpoint.every=2", "tracking.tensorboard=true",
		"tracking.wandb.project=hindsearch-test", "tracking.mlflow.tracking_uri=" + uri, "tracking.mlflow.experiment=trackers-test"}
	cmd := orchCmd(t, []string{"run", "recipes/sim.yaml", "--progress", "off"}, sets)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	rd := &results.RunDir{Path: dir}
	killed := false
	for !killed {
		select {
		case err := <-done:
			t.Fatalf("the run ended before the kill: %v\n%s", err, buf.String())
		case <-time.After(100 * time.Millisecond):
		}
		recs, _ := rd.ReadSteps()
		if len(recs) < 5 || rd.SavedStep() != 4 || !wandbHas(dir, 5) || !mlflowHas(uri, dir, 5) {
			continue
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
		killed = true
	}
	out := orch(t, []string{"run", "recipes/sim.yaml", "--progress", "off", "--resume"}, sets)
	recs := steps(t, dir)
	if len(recs) != 6 {
		t.Fatalf("%d step records after the resume\n%s", len(recs), out)
	}
	var st struct {
		Tracking struct{ WandB, MLflow string } `json:"tracking"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(b, &st)

	// TensorBoard: the killed run's step 5 purged by the resumed file's
	// SessionLog START; every step once.
	var tb struct {
		Scalars map[string][][2]float64 `json:"scalars"`
		Texts   map[string][]int        `json:"texts"`
	}
	readBack(t, bin, &tb, "tensorboard", filepath.Join(dir, "tensorboard"))
	checkSeries(t, "tensorboard reward_mean", tb.Scalars["reward_mean"], recs, 1e-6)
	if got := tb.Scalars["eval/search/avg/em"]; len(got) != 3 || got[0][0] != 0 || got[2][0] != 6 {
		t.Errorf("tensorboard eval/search/avg/em %v, want steps 0, 3, 6", got)
	}
	if !slices.Equal(tb.Texts["recipe"], []int{0}) {
		t.Errorf("tensorboard recipe text at steps %v, want [0]", tb.Texts["recipe"])
	}

	// W&B: one offline run, the id state.json keeps, cut at the resume
	// point and continued: history steps 0..6 once, an exit 0.
	runs, _ := filepath.Glob(filepath.Join(dir, "wandb", "offline-run-*"))
	if len(runs) != 1 || !strings.HasSuffix(runs[0], "-"+st.Tracking.WandB) {
		t.Fatalf("offline runs %v, want one of run id %q", runs, st.Tracking.WandB)
	}
	var hist [][2]float64
	var steps []float64
	exit := -1.0
	for _, r := range wandbRecords(t, bin, filepath.Join(runs[0], "run-"+st.Tracking.WandB+".wandb")) {
		switch r["type"] {
		case "history":
			item := r["history"].(map[string]any)["item"].(map[string]any)
			steps = append(steps, item["_step"].(float64))
			if v, ok := item["reward_mean"].(float64); ok {
				hist = append(hist, [2]float64{item["_step"].(float64), v})
			}
		case "exit":
			if c, ok := r["exit"].(map[string]any)["exit_code"].(float64); ok {
				exit = c
			} else {
				exit = 0 // proto3 JSON leaves a zero exit code out
			}
		}
	}
	if !slices.Equal(steps, []float64{0, 1, 2, 3, 4, 5, 6}) || exit != 0 {
		t.Errorf("wandb history steps %v, exit %v: want 0..6 once and exit 0", steps, exit)
	}
	checkSeries(t, "wandb reward_mean", hist, recs, 1e-12)

	// MLflow: the run state.json keeps, finished, every step once.
	var ml struct {
		Run       struct{ Status string } `json:"run"`
		Params    map[string]string       `json:"params"`
		Metrics   map[string][][2]float64 `json:"metrics"`
		Artifacts []string                `json:"artifacts"`
	}
	readBack(t, bin, &ml, "mlflow", uri, st.Tracking.MLflow)
	if ml.Run.Status != "FINISHED" || ml.Params["train.steps"] != "6" {
		t.Errorf("mlflow run status %q, train.steps param %q", ml.Run.Status, ml.Params["train.steps"])
	}
	checkSeries(t, "mlflow reward_mean", ml.Metrics["reward_mean"], recs, 1e-12)
	for _, a := range []string{results.TrainingCurvesFile, results.HealthCurvesFile, "results.txt", "recipe.yaml"} {
		if !slices.Contains(ml.Artifacts, a) {
			t.Errorf("mlflow artifacts %v lack %s", ml.Artifacts, a)
		}
	}
}

// checkSeries checks a tracker's (step, value) points of reward_mean
// against the step records: steps 1..n once each, the values within tol.
func checkSeries(t *testing.T, what string, pts [][2]float64, recs []results.StepRecord, tol float64) {
	t.Helper()
	if len(pts) != len(recs) {
		t.Errorf("%s: %d points %v, want one per step (%d)", what, len(pts), pts, len(recs))
		return
	}
	for i, r := range recs {
		if int(pts[i][0]) != r.Step || math.Abs(pts[i][1]-r.RewardMean) > tol {
			t.Errorf("%s: point %d is %v, want step %d value %v", what, i, pts[i], r.Step, r.RewardMean)
		}
	}
}

// wandbHas reports whether the run's W&B log has a history row of step.
func wandbHas(dir string, step int) bool {
	files, _ := filepath.Glob(filepath.Join(dir, "wandb", "offline-run-*", "*.wandb"))
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		recs, _ := wandb.Scan(fh)
		fh.Close()
		for _, r := range recs {
			if r.Step != nil && *r.Step == step {
				return true
			}
		}
	}
	return false
}

// mlflowHas reports whether the MLflow run the run directory's live
// trackers made holds reward_mean at step (found through the server's
// search, as state.json names the run only at a checkpoint).
func mlflowHas(uri, dir string, step int) bool {
	body := strings.NewReader(`{"experiment_ids": ["1"], "max_results": 10}`)
	resp, err := http.Post(uri+"/api/2.0/mlflow/runs/search", "application/json", body)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var got struct {
		Runs []struct {
			Info struct {
				RunID string `json:"run_id"`
			} `json:"info"`
		} `json:"runs"`
	}
	if json.NewDecoder(resp.Body).Decode(&got) != nil || len(got.Runs) != 1 {
		return false
	}
	r, err := http.Get(uri + "/api/2.0/mlflow/metrics/get-history?metric_key=reward_mean&run_id=" + got.Runs[0].Info.RunID)
	if err != nil {
		return false
	}
	defer r.Body.Close()
	var h struct {
		Metrics []struct {
			Step json.Number `json:"step"`
		} `json:"metrics"`
	}
	if json.NewDecoder(r.Body).Decode(&h) != nil {
		return false
	}
	for _, m := range h.Metrics {
		if s, _ := m.Step.Int64(); int(s) == step {
			return true
		}
	}
	return false
}

// A log whose run record spans three blocks (a 70 KB config value: FIRST,
// MIDDLE and LAST chunks) and whose history crosses block boundaries
// reads back whole with wandb's own reader.
func TestTrackersWandBAcrossBlocks(t *testing.T) {
	bin := trackerBin(t)
	root := t.TempDir()
	start := time.Unix(1_800_000_000, 0)
	w, err := wandb.Open(root, wandb.Run{ID: "blocks01", Project: "p", Config: map[string]any{"big": strings.Repeat("x", 70000), "n": 3},
		Start: start}, -1)
	if err != nil {
		t.Fatal(err)
	}
	for s := 0; s < 400; s++ {
		if err := w.Log(s, start.Add(time.Duration(s)*time.Second), map[string]float64{"loss": float64(s) / 7, "acc": 0.5}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Exit(0, start.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	var steps int
	var big int
	for _, r := range wandbRecords(t, bin, filepath.Join(w.Dir(), "run-blocks01.wandb")) {
		switch r["type"] {
		case "run":
			upd := r["run"].(map[string]any)["config"].(map[string]any)["update"].(map[string]any)
			if s, ok := upd["big"].(string); ok {
				big = len(s)
			}
		case "history":
			item := r["history"].(map[string]any)["item"].(map[string]any)
			if int(item["_step"].(float64)) != steps || math.Abs(item["loss"].(float64)-float64(steps)/7) > 1e-12 {
				t.Fatalf("history row %d: %v", steps, item)
			}
			steps++
		}
	}
	if big != 70000 || steps != 400 {
		t.Errorf("config value of %d bytes, %d history rows: want 70000 and 400", big, steps)
	}
}
