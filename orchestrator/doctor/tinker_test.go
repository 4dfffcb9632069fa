package doctor

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/orchestrator/setup"
)

// A Tinker policy's rows: health, capabilities, a one-token sample with
// ids and logprobs, prompt logprobs and the local tokenizer against the
// sampled ids; on SkyRL's JAX backend, which samples the base model by
// name, all of them run; on FSDP, which refuses it, the sample row says
// why the run does not need it and the rest are skipped. No sync.dir rows:
// sync.kind tinker moves no files.
func TestDoctorTinkerPolicy(t *testing.T) {
	for _, tc := range []struct {
		backend string
		policy  []row
	}{
		{"jax", []row{{"policy", "health", CheckOK}, {"policy", "capabilities", CheckOK}, {"policy", "sampling slots", CheckOK}, {"policy", "sample", CheckOK},
			{"policy", "prompt logprobs", CheckOK}, {"policy", "local tokenizer", CheckOK}}},
		{"fsdp", []row{{"policy", "health", CheckOK}, {"policy", "capabilities", CheckOK}, {"policy", "sampling slots", CheckOK}, {"policy", "sample", CheckOK},
			{"policy", "prompt logprobs", CheckSkip}, {"policy", "local tokenizer", CheckSkip}}},
	} {
		t.Run(tc.backend, func(t *testing.T) {
			r := testRecipe(t, "", "policy.server=tinker", "sync.kind=tinker", "policy.tokenize=local", "sim.trainer.backend="+tc.backend)
			deps, emb, err := setup.Connect(context.Background(), r, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer emb.Close()
			rep := Run(context.Background(), r, deps, Options{})
			want := append(tc.policy, row{"judge", "chat", CheckOK}, row{"retriever", "retrieve", CheckOK},
				row{"trainer", "healthz", CheckOK}, row{"trainer", "base model", CheckOK}, row{"trainer", "delete route", CheckOK},
				row{"trainer", "weights", CheckOK}, row{"trainer", "optimizer", CheckOK}, row{"trainer", "loss aggregation", CheckOK}, row{"trainer", "checkpoints dir", CheckOK},
				row{"teacher", "hinted contexts", CheckOK})
			if got := rows(rep); !slices.Equal(got, want) {
				t.Fatalf("rows:\n%v\nwant\n%v\n%s", got, want, report(t, rep))
			}
			if d := rep.Checks[3].Detail; tc.backend == "fsdp" && !strings.Contains(d, "ephemeral save") {
				t.Errorf("sample row on fsdp: %q", d)
			}
			if d := rep.Checks[5].Detail; tc.backend == "jax" && !strings.Contains(d, "read back to themselves") {
				t.Errorf("local tokenizer row: %q", d)
			}
		})
	}
}

// The sampling slots row holds the recipe to what the backend can serve
// under sync.kind tinker: off the policy, SkyRL's JAX backend would roll
// the training back (B1) and its FSDP backend has no older weights; the
// initial-policy teacher needs the initial weights all run long, which
// FSDP cannot serve (B2) and JAX serves from the base model. Preflight
// stops such a run before step 1.
func TestDoctorTinkerSamplingSlots(t *testing.T) {
	for _, tc := range []struct {
		sets   []string
		status CheckStatus
		detail string
	}{
		{[]string{"sim.trainer.backend=jax"}, CheckOK, "SkyRL's JAX backend"},
		{[]string{"sim.trainer.backend=jax", "train.max_off_policy_steps=1"}, CheckFail, "rolling the training back"},
		{[]string{"sim.trainer.backend=jax", "hindsight.teacher=initial"}, CheckOK, "served by base-model sampling sessions"},
		{[]string{"sim.trainer.backend=fsdp"}, CheckOK, "FSDP or Megatron"},
		{[]string{"sim.trainer.backend=fsdp", "train.max_off_policy_steps=1"}, CheckFail, "samples the newest"},
		{[]string{"sim.trainer.backend=fsdp", "hindsight.teacher=initial"}, CheckFail, "B2"},
	} {
		t.Run(strings.Join(tc.sets, ","), func(t *testing.T) {
			r := testRecipe(t, "", append([]string{"policy.server=tinker", "sync.kind=tinker", "policy.tokenize=local"}, tc.sets...)...)
			deps, emb, err := setup.Connect(context.Background(), r, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer emb.Close()
			rep := Run(context.Background(), r, deps, Options{})
			for _, c := range rep.Checks {
				if c.Name == "sampling slots" {
					if c.Status != tc.status || !strings.Contains(c.Detail, tc.detail) {
						t.Errorf("row %+v, want %s with %q", c, tc.status, tc.detail)
					}
					err := Preflight(context.Background(), r, deps)
					if (err != nil) != (tc.status == CheckFail) {
						t.Errorf("preflight: %v", err)
					}
					return
				}
			}
			t.Fatalf("no sampling slots row:\n%s", report(t, rep))
		})
	}
}

// The hosted service needs a key: its absence is a failure that says so,
// for the trainer and a Tinker judge alike.
func TestDoctorHostedTinkerKey(t *testing.T) {
	c := &checker{env: map[string]string{}}
	ch, ok := c.apiKey("trainer", "https://"+HostedTinkerHost+"/services/tinker-prod", "trainer.api_key_env", "TINKER_API_KEY", keyUnknown)
	if !ok || ch.Status != CheckFail || !strings.Contains(ch.Detail, "hosted Tinker service needs an API key") || !strings.Contains(ch.Fix, "export TINKER_API_KEY=") {
		t.Errorf("%+v", ch)
	}
	c.env["TINKER_API_KEY"] = "k"
	if ch, _ := c.apiKey("trainer", "https://"+HostedTinkerHost, "trainer.api_key_env", "TINKER_API_KEY", keyUnknown); ch.Status != CheckOK {
		t.Errorf("with the key: %+v", ch)
	}
}
