package roles

import (
	"errors"
	"github.com/hindsearch/hindsearch/clients/tracker/mlflow"

	"github.com/hindsearch/hindsearch/clients/judge"
	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/retriever"
	"github.com/hindsearch/hindsearch/clients/router"
	"github.com/hindsearch/hindsearch/clients/trainer"
)

// Deps are the servers a run drives, one client per role.
type Deps struct {
	Policies []policy.Policy
	// NewPolicy builds the client of a policy server that joins while
	// the run runs (policy.endpoints_file), as Connect built Policies';
	// nil where no server can join.
	NewPolicy func(url string) (policy.Policy, error)
	// Router is the data plane of policy.router_url (the policy client at
	// the router's URL) and RouterAdmin its worker list; both nil without
	// a router.
	Router      policy.Policy
	RouterAdmin router.Router
	Judge       judge.Judge
	Retriever   retriever.Retriever
	Trainer     trainer.Trainer
	// Simulated names the roles served by the embedded simulator; every
	// output of the run says so when it is non-empty.
	Simulated []string
	// Tokenizer is the policy model's tokenizer in this process
	// (policy.tokenizer): the search span, the teacher cut-off and the
	// per-token text are located by the sampled ids' bytes under it, and
	// with policy.tokenize local it tokenizes environment text and the
	// prompt. A run needs it.
	Tokenizer *Tokenizer
	// TokenizerErr is why Connect found no tokenizer (a run fails with
	// it; doctor reports it as a failed check).
	TokenizerErr error
	// References are the reference servers (reference.urls): the initial
	// weights trainer.kl_coef scores trajectories under. Empty: the
	// policy servers' policy.model.
	References []policy.Policy
	// TrainerSampler samples trainer.base_model through the trainer's own
	// sampling routes, to tell its backend (trainer.backend auto on a
	// server neither embedded nor hosted); nil otherwise.
	TrainerSampler policy.Policy
	// MLflow is the MLflow tracking server's client
	// (tracking.mlflow.tracking_uri); nil without one.
	MLflow mlflow.Tracker
}

// LocalTokenizer returns deps' tokenizer, or why there is none.
func (d Deps) LocalTokenizer() (*Tokenizer, error) {
	switch {
	case d.TokenizerErr != nil:
		return nil, d.TokenizerErr
	case d.Tokenizer == nil || d.Tokenizer.Vocab == nil:
		return nil, errors.New("policy.tokenizer: no local tokenizer (Deps.Tokenizer): the search span and token texts are located with it")
	}
	return d.Tokenizer, nil
}
