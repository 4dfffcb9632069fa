package sim

import (
	"os"
	"sync"
	"testing"

	"github.com/hindsearch/hindsearch/sim/internal/lmtest"
	"github.com/hindsearch/hindsearch/sim/internal/simtest"
	"github.com/hindsearch/hindsearch/sim/lm"
)

// fixture is the data and model every test shares: built once per test
// binary.
type fixture struct {
	corpus []string // contents strings, file order
	hotpot []simtest.QA
	tk     *lm.Tokenizer
	model  *lm.Model
}

var (
	fxOnce sync.Once
	fx     *fixture
	fxErr  error
)

// The base model the test servers serve.
const testBase = "sim-base"

// The helpers the tests share with lm's and sim/trainer's (simtest), under
// their names here.
type apiClient = simtest.Client

var (
	search        = simtest.Search
	judgePrompt   = simtest.JudgePrompt
	concat        = simtest.Concat
	quoted        = simtest.Quoted
	createSession = simtest.CreateSession
	fbBody        = simtest.FBBody
	optimBody     = simtest.OptimBody
	unpackArchive = simtest.UnpackArchive
)

// The thoughts the simulated agent writes before a search and before an
// answer (lm's thoughtSearch and thoughtAnswer), for the trajectories the
// tests write themselves.
const (
	thoughtSearch = "<think> I need more information. </think>\n"
	thoughtAnswer = "<think> I have enough information. </think>\n"
)

func TestMain(m *testing.M) { os.Exit(simtest.Main(m)) }

// getFixture loads the sample corpus and questions and builds the tokenizer
// and model the way the orchestrator does (the model knows every question
// file's gold answers, for its reading skill).
func getFixture(t testing.TB) *fixture {
	t.Helper()
	d := simtest.Load(t)
	fxOnce.Do(func() {
		f := &fixture{corpus: d.Corpus, hotpot: d.Hotpot}
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
