package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The command: `orchestrate ablate recipes/sim-ablate.yaml` at
// full weights through SGLang, every variant against ONE `orchestrate
// serve sim` (its trainer behaving like SkyRL's FSDP backend, which holds
// one policy model at a time). Each variant must release its model so the
// next can create one, must accept replicas that SGLang renamed to the
// previous variant's weights, and a variant the command line's overrides
// make impossible (teacher-initial with full-weight sync needs reference
// servers, which the command line takes away) is reported as skipped
// while the others run.
func TestAblateAgainstOneServeSimAtRankZero(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three short trainings")
	}
	dir := t.TempDir()
	full := []string{"--set", "trainer.lora_rank=0", "--set", "sync.kind=sglang_disk", "--set", "policy.server=sglang",
		"--set", "policy.tokenize=local", "--set", "sim.trainer.backend=fsdp", "--set", "reference.urls=", "--set", "trainer.kl_coef=0"}
	small := []string{"--set", "train.steps=2", "--set", "eval.every=2", "--set", "eval.per_dataset=3",
		"--set", "retriever.corpus=" + smallCorpus(t, dir, 300), "--set", "retriever.index_dir=" + filepath.Join(dir, "index")}
	args := append(append([]string{"../../recipes/sim-ablate.yaml"}, full...), small...)
	srv := startServeSim(t, append(args, "--set", "output.dir="+filepath.Join(dir, "servers"), "--json")...)
	line, err := srv.stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("no address line (%v); command: %v", err, srv.wait(t))
	}
	var a simAddrs
	if err := json.Unmarshal([]byte(line), &a); err != nil {
		t.Fatal(err)
	}
	remote := []string{"--set", "policy.urls=" + strings.Join(a.Policy, ","), "--set", "policy.tokenizer=sim",
		"--set", "judge.url=" + a.Judge, "--set", "trainer.url=" + a.Trainer, "--set", "retriever.url=" + a.Retriever,
		"--set", "trainer.checkpoints_dir=" + a.CheckpointsDir}
	ablate := append(append(append([]string{"ablate"}, args...), remote...),
		"--set", "output.dir="+filepath.Join(dir, "ablate"), "--only", "no-hindsight,teacher-initial", "--progress", "off")
	stdout, stderr, err := runCLI(t, nil, ablate...)
	if err != nil {
		t.Fatalf("ablate: %v\n%s\n%s", err, stdout, stderr)
	}
	for _, want := range []string{"== variant 1/3: base", "== variant 2/3: no-hindsight", "== variant 3/3: teacher-initial SKIPPED",
		`hindsight.teacher: "initial" needs the initial weights served, which sync.kind sglang_disk overwrites`, "| no-hindsight", "teacher-initial: SKIPPED"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("ablate output lacks %q:\n%s", want, stdout)
		}
	}
	// Both variants trained on the one trainer: two models, each with its
	// own checkpoints, the second created after the first was unloaded.
	models, err := os.ReadDir(a.CheckpointsDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(models) != 2 {
		t.Errorf("trainer checkpoint dirs %v, want one per variant", models)
	}
	// Run again at once: the variants of the first ablation released the
	// trainer, so nothing waits for SkyRL's stale-session cleanup.
	if stdout, stderr, err := runCLI(t, nil, append(ablate, "--overwrite")...); err != nil {
		t.Fatalf("second ablate: %v\n%s\n%s", err, stdout, stderr)
	}
}
