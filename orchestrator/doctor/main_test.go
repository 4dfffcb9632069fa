package doctor

import (
	"os"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/orchestrator/internal/testkit"
	"github.com/hindsearch/hindsearch/recipes"
)

func TestMain(m *testing.M) { os.Exit(testkit.Main(m)) }

// testRecipe is testkit.Recipe.
func testRecipe(t *testing.T, body string, sets ...string) *recipes.Recipe {
	t.Helper()
	return testkit.Recipe(t, body, sets...)
}

// urlPolicy is a policy replica known only by its URL (the checks that
// read nothing else of it).
type urlPolicy struct {
	policy.Policy
	url string
}

func (p urlPolicy) URL() string { return p.url }
