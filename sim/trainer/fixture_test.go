package trainer

import (
	"os"
	"sync"
	"testing"

	"github.com/hindsearch/hindsearch/sim/internal/lmtest"
	"github.com/hindsearch/hindsearch/sim/internal/simtest"
	"github.com/hindsearch/hindsearch/sim/lm"
)

// The base model the test trainers serve.
const testBase = "sim-base"

// fixture is the data and model every test shares: built once per test
// binary (as sim's tests build theirs).
type fixture struct {
	hotpot []simtest.QA
	tk     *lm.Tokenizer
	model  *lm.Model
}

var (
	fxOnce sync.Once
	fx     *fixture
	fxErr  error
)

// The helpers the tests share with sim's (simtest), under their names
// here.
type apiClient = simtest.Client

var (
	search        = simtest.Search
	concat        = simtest.Concat
	createSession = simtest.CreateSession
	fbBody        = simtest.FBBody
	optimBody     = simtest.OptimBody
	unpackArchive = simtest.UnpackArchive
)

func TestMain(m *testing.M) { os.Exit(simtest.Main(m)) }

// getFixture loads the sample questions and builds the tokenizer and model
// the way the orchestrator does (the model knows every question file's
// gold answers, for its reading skill).
func getFixture(t testing.TB) *fixture {
	t.Helper()
	d := simtest.Load(t)
	fxOnce.Do(func() {
		f := &fixture{hotpot: d.Hotpot}
		if f.tk, fxErr = lm.NewTokenizer(); fxErr != nil {
			return
		}
		// As the orchestrator starts it (orchestrator.SimAnswers): with
		// the gold answers of every question file.
		f.model = lm.NewModel(f.tk, 1e-6)
		f.model.SetAnswers(d.Answers)
		fx = f
	})
	if fxErr != nil {
		t.Fatalf("test fixture: %v", fxErr)
	}
	return fx
}

// The rollout helpers the tests share with the other simulated servers'
// (lmtest), under their names here.
type trajectory = lmtest.Trajectory

var (
	trainSampling = lmtest.TrainSampling
	rollout       = lmtest.Rollout
	bm25Docs      = lmtest.BM25Docs
	promptText    = lmtest.PromptText
	tensor        = lmtest.Tensor
	datum         = lmtest.Datum
)

// createModel creates a model of testBase (LoRA rank 8) through c's
// session and returns its id.
func createModel(c apiClient, session string, seq int) string {
	c.T.Helper()
	return lmtest.CreateModel(c, session, seq, testBase)
}
