package orchestrator

import (
	"testing"

	"github.com/hindsearch/hindsearch/orchestrator/setup"
)

// Real vLLM and SGLang servers accept and ignore a request field they do
// not know, so a misspelt or version-mismatched field would silently leave
// the server's default in force. A whole run (rollouts, critiques, teacher
// scoring, evaluation, both sync kinds) against the simulated servers, which
// ignore unknown fields the same way and count them, must send none.
func TestRunSendsOnlyFieldsTheServersRead(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two short trainings")
	}
	for _, kind := range []string{"lora", "sglang_disk"} {
		t.Run(kind, func(t *testing.T) {
			sets := []string{"sync.kind=" + kind}
			if kind == "sglang_disk" {
				sets = append(sets, "trainer.lora_rank=0", "sim.trainer.backend=fsdp") // full weights
			}
			r := testRecipe(t, "", sets...)
			deps, emb, err := setup.Connect(t.Context(), r, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer emb.Close()
			rn := &Runner{Recipe: r, Deps: deps}
			if _, err := rn.Run(t.Context()); err != nil {
				t.Fatal(err)
			}
			s := emb.Sim()
			for i, p := range s.Policies {
				if p.Stats().Requests == 0 {
					t.Errorf("policy replica %d served no request", i)
				}
				if got := p.IgnoredFields(); len(got) != 0 {
					t.Errorf("policy replica %d ignored request fields: %v", i, got)
				}
			}
			if got := s.JudgeSrv.IgnoredFields(); len(got) != 0 {
				t.Errorf("the judge ignored request fields: %v", got)
			}
		})
	}
}
