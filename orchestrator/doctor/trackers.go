package doctor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"

	"github.com/hindsearch/hindsearch/clients/transport"
)

// trackers checks the recipe's trackers (tracking.*): the directories the
// file trackers write, and the MLflow server (its health route, then the
// experiment, which also tries the credentials). None when none is set.
func (c *checker) trackers(ctx context.Context) []Check {
	t := c.r.Tracking
	var out []Check
	if t.TensorBoard {
		dir := filepath.Join(c.r.Output.Dir, "tensorboard")
		out = append(out, probeDir("tracking", "tensorboard dir", dir, fmt.Sprintf("make %s writable, or set output.dir to a writable directory", dir)))
	}
	if t.WandB.Project != "" {
		dir := filepath.Join(cmp.Or(t.WandB.Dir, c.r.Output.Dir), "wandb")
		ch := probeDir("tracking", "wandb offline dir", dir, fmt.Sprintf("make %s writable, or set tracking.wandb.dir to a writable directory", dir))
		if ch.Status == CheckOK {
			ch.Detail += fmt.Sprintf("; project %q, offline: `wandb sync` uploads the run later", t.WandB.Project)
		}
		out = append(out, ch)
	}
	if m := c.deps.MLflow; m != nil {
		ch := Check{Role: "tracking", Server: m.URL(), Name: "mlflow"}
		cctx, cancel := c.bounded(ctx)
		defer cancel()
		exp := cmp.Or(t.MLflow.Experiment, c.r.Name)
		var se *transport.StatusError
		if err := m.Health(cctx); err != nil {
			ch.Status, ch.Detail = CheckFail, "GET /health: "+reason(err)
			ch.Fix = "start the server (mlflow server --host 127.0.0.1 --port 5000) or fix tracking.mlflow.tracking_uri; a run goes on without it, retrying"
		} else if id, found, err := m.Lookup(cctx, exp); err != nil {
			ch.Status, ch.Detail = CheckFail, reason(err)
			ch.Fix = "fix tracking.mlflow.tracking_uri or tracking.mlflow.experiment"
			if errors.As(err, &se) && (se.Status == http.StatusUnauthorized || se.Status == http.StatusForbidden) {
				ch.Fix = "set MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, to credentials the server accepts"
			}
		} else if found {
			ch.Status, ch.Detail = CheckOK, fmt.Sprintf("healthy; experiment %q is id %s", exp, id)
		} else {
			ch.Status, ch.Detail = CheckOK, fmt.Sprintf("healthy; experiment %q does not exist yet: the run makes it", exp)
		}
		out = append(out, ch)
	}
	return out
}
