package doctor

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/clients/tracker/mlflow"
	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
)

// The tracker rows: the file trackers' directories, and an MLflow server
// that is healthy but refuses the credentials (a FAIL naming MLflow's
// variables), or accepts them without the experiment (ok: the run makes
// it). No tracker, no row.
func TestDoctorTrackerRows(t *testing.T) {
	refuse := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/health":
			_, _ = w.Write([]byte("OK"))
		case refuse:
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
		default:
			http.Error(w, `{"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "no"}`, http.StatusNotFound)
		}
	}))
	defer srv.Close()
	r := testRecipe(t, "", "tracking.tensorboard=true", "tracking.wandb.project=p", "tracking.mlflow.tracking_uri="+srv.URL)
	o := transport.DefaultOptions("mlflow", srv.URL)
	o.Retries = 0
	mc, err := mlflow.New(o, mlflow.Credentials{Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	c := newChecker(r, roles.Deps{MLflow: mc}, nil, 0, true)
	got := c.trackers(context.Background())
	if len(got) != 3 || got[0].Name != "tensorboard dir" || got[0].Status != CheckOK || got[1].Name != "wandb offline dir" ||
		got[2].Status != CheckFail || !strings.Contains(got[2].Fix, "MLFLOW_TRACKING_TOKEN") {
		t.Fatalf("rows %+v", got)
	}
	refuse = false
	if got := c.trackers(context.Background()); got[2].Status != CheckOK || !strings.Contains(got[2].Detail, "does not exist yet") {
		t.Errorf("mlflow row %+v", got[2])
	}
	none := newChecker(testRecipe(t, ""), roles.Deps{}, nil, 0, true)
	if got := none.trackers(context.Background()); len(got) != 0 {
		t.Errorf("rows without trackers: %+v", got)
	}
}
