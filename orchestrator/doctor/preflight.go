package doctor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/recipes"
)

// PreflightTimeout bounds the checks made before the first step, so that a
// server that is down or misconfigured fails the run at once, not after
// retries deep into a step.
const PreflightTimeout = 20 * time.Second

// Preflight checks, before any work, that every server answers and serves
// what the recipe asks for: each policy replica is healthy, serves
// policy.model (and the teacher model when it is another one) and has the
// route sync.kind needs (runtime LoRA loading, or SGLang's
// /update_weights_from_disk); the retriever answers a probe query in the
// Search-R1 shape; the trainer lists trainer.base_model. It is the fast
// subset of Doctor's checks (the same code), and returns one error listing
// every failure, each naming the role, the URL and what to do. Roles
// without a client in deps are not checked.
func Preflight(ctx context.Context, r *recipes.Recipe, deps roles.Deps) error {
	ctx, cancel := context.WithTimeout(ctx, PreflightTimeout)
	defer cancel()
	checks := newChecker(r, deps, nil, PreflightTimeout, false).run(ctx)
	var problems []string
	for _, c := range checks {
		if c.Status == CheckFail {
			problems = append(problems, fmt.Sprintf("%s %s: %s: %s", c.Role, c.Server, c.Detail, c.Fix))
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
