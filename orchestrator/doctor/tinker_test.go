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
		{"jax", []row{{"policy", "health", CheckOK}, {"policy", "capabilities", CheckOK}, {"policy", "sample", CheckOK},
			{"policy", "prompt logprobs", CheckOK}, {"policy", "local tokenizer", CheckOK}}},
		{"fsdp", []row{{"policy", "health", CheckOK}, {"policy", "capabilities", CheckOK}, {"policy", "sample", CheckOK},
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
				row{"trainer", "weights", CheckOK}, row{"trainer", "optimizer", CheckOK}, row{"trainer", "checkpoints dir", CheckOK})
			if got := rows(rep); !slices.Equal(got, want) {
				t.Fatalf("rows:\n%v\nwant\n%v\n%s", got, want, report(t, rep))
			}
			if d := rep.Checks[2].Detail; tc.backend == "fsdp" && !strings.Contains(d, "ephemeral save") {
				t.Errorf("sample row on fsdp: %q", d)
			}
			if d := rep.Checks[4].Detail; tc.backend == "jax" && !strings.Contains(d, "read back to themselves") {
				t.Errorf("local tokenizer row: %q", d)
			}
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
