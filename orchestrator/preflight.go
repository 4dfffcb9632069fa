package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/recipes"
)

// preflightTimeout bounds the checks made before the first step, so that a
// server that is down or misconfigured fails the run at once, not after
// retries deep into a step.
const preflightTimeout = 20 * time.Second

// Preflight checks, before any work, that every server answers and serves
// what the recipe asks for: each policy replica is healthy and serves
// policy.model (and the teacher model when it is another one); the
// retriever answers a probe query; the trainer lists trainer.base_model.
// Each failure names the role, the URL and what to do.
func Preflight(ctx context.Context, r *recipes.Recipe, deps Deps) error {
	ctx, cancel := context.WithTimeout(ctx, preflightTimeout)
	defer cancel()
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	for _, p := range deps.Policies {
		if err := p.Health(ctx); err != nil {
			fail("policy %s is not reachable or not healthy (%v): start the vLLM server or fix policy.urls", p.URL(), short(err))
			continue
		}
		models, err := p.Models(ctx)
		if err != nil {
			fail("policy %s: GET /v1/models: %v", p.URL(), short(err))
			continue
		}
		// Runtime LoRA loading: unloading an adapter that is not there is
		// refused by a server with the routes, and missing without them.
		if r.Sync.Kind == recipes.SyncLoRA {
			if err := p.UnloadLoRA(ctx, "hindsearch-preflight-probe"); errors.Is(err, policy.ErrLoRADisabled) {
				fail("policy %s: %v", p.URL(), policy.ErrLoRADisabled)
			}
		}
		want := []string{r.Policy.Model}
		if t := r.Hindsight.Teacher; r.Hindsight.Enabled && t != recipes.TeacherSelf && t != recipes.TeacherInitial {
			want = append(want, t)
		}
		for _, m := range want {
			if !slices.Contains(models, m) {
				fail("policy %s does not serve model %q (it serves %s): set policy.model (or hindsight.teacher) to a served name, or start vLLM with --served-model-name %s",
					p.URL(), m, strings.Join(models, ", "), m)
			}
		}
	}
	if deps.Retriever != nil {
		hits, err := deps.Retriever.Retrieve(ctx, []string{"preflight probe"}, 1)
		if err != nil || len(hits) != 1 {
			fail("retriever %s does not answer POST /retrieve (%v): start the retrieval server or fix retriever.url", deps.Retriever.URL(), short(err))
		}
	}
	if deps.Trainer != nil {
		caps, err := deps.Trainer.Capabilities(ctx)
		switch {
		case err != nil:
			fail("trainer %s is not reachable (%v): start the Tinker API server or fix trainer.url", deps.Trainer.URL(), short(err))
		case !slices.Contains(caps, r.Trainer.BaseModel):
			fail("trainer %s does not support base model %q (it supports %s): set trainer.base_model, or start the trainer with that model",
				deps.Trainer.URL(), r.Trainer.BaseModel, strings.Join(caps, ", "))
		}
	}
	if len(problems) > 0 {
		return errors.New("preflight: " + strings.Join(problems, "; "))
	}
	return nil
}

// short is an error's message without a long body.
func short(err error) string {
	if err == nil {
		return "no answer"
	}
	var se *transport.StatusError
	if errors.As(err, &se) {
		return fmt.Sprintf("status %d: %.120s", se.Status, se.Body)
	}
	s := err.Error()
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
