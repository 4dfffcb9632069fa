package trainer_test

import (
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/clients/trainer/trainertest"
	"github.com/hindsearch/hindsearch/sim/internal/contracttest"
	simtrainer "github.com/hindsearch/hindsearch/sim/trainer"
)

// The trainer role's contract suite run against clients/trainer and the
// simulated Tinker API server: SkyRL's JAX backend (a LoRA of rank 8, the
// default), its FSDP backend (full weights, one model at a time) and the
// hosted service's try_again polling, and a SkyRL without the DELETE
// checkpoint route (docs/conformance.md, "Contract suites").
func TestTrainerContract(t *testing.T) {
	for _, tc := range []struct {
		name     string
		backend  simtrainer.Backend
		rank     int
		tryAgain bool
		noDelete bool
	}{
		{"jax", simtrainer.BackendJAX, 8, false, false},
		{"fsdp", simtrainer.BackendFSDP, 0, false, false},
		{"hosted-try-again", simtrainer.BackendJAX, 8, true, false},
		// skyrl 0.3.0 from PyPI: no DELETE checkpoint route (seen running,
		// sim/real's TestTrainerContractSkyRL).
		{"jax-no-delete-route", simtrainer.BackendJAX, 8, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trainertest.Run(t, func(t *testing.T) *trainertest.Backend {
				ts := simtrainer.NewServer(sharedModel(t), contractBase, t.TempDir())
				ts.Backend, ts.TryAgain, ts.NoDeleteRoute = tc.backend, tc.tryAgain, tc.noDelete
				ts.PollWait = 20 * time.Millisecond
				// Saves take long enough for a delete to meet one running
				// (SkyRL's 425), and futures stay pending for a few polls.
				ts.StepDelay = 150 * time.Millisecond
				s, c := contractClient(t, ts)
				return &trainertest.Backend{
					Trainer: c, Checkpoints: c.Checkpoints, BaseModel: contractBase, Rank: tc.rank, NoDeleteRoute: tc.noDelete,
					Tokens:      sharedModel(t).Tokenizer().Encode("Question: who wrote The Old Man and the Sea? Answer: <answer> Ernest Hemingway </answer>"),
					Lose:        func(route string, n int) { s.Fault(t, route, n, "lost") },
					SavePending: contracttest.SavePending(t, s.URL),
				}
			})
		})
	}
}

// contractClient serves ts behind the fault switch until the test ends
// and returns the switch and a client of it with quick polls.
func contractClient(t *testing.T, ts *simtrainer.Server) (*switchServer, *trainer.Client) {
	t.Helper()
	t.Cleanup(ts.Close)
	s := serveSwitch(t, ts.Handler())
	c, err := trainer.New(contractOptions(s.URL), "")
	if err != nil {
		t.Fatal(err)
	}
	c.PollWaitMin, c.PollWaitMax = 2*time.Millisecond, 20*time.Millisecond
	c.ListWaitMax, c.DeleteTries = 20*time.Millisecond, 50
	c.RecoveryTimeout = 20 * time.Second
	t.Cleanup(c.Close)
	return s, c
}

// The contract servers' helpers (contracttest), under their names here.
type switchServer = contracttest.Switch

const contractBase = contracttest.Base

var (
	sharedModel     = contracttest.SharedModel
	serveSwitch     = contracttest.ServeSwitch
	contractOptions = contracttest.Options
)
