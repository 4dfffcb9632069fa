package recipes

import (
	"strings"
	"testing"
)

// sim.retriever_style is dense by default and only dense or bm25.
func TestValidateSimRetrieverStyle(t *testing.T) {
	if d := Defaults(); d.Sim.RetrieverStyle != RetrieverStyleDense {
		t.Fatalf("default sim.retriever_style %q", d.Sim.RetrieverStyle)
	}
	for _, style := range []string{RetrieverStyleDense, RetrieverStyleBM25} {
		r := valid(t)
		r.Sim.RetrieverStyle = style
		if err := r.Validate(); err != nil {
			t.Errorf("%s: %v", style, err)
		}
	}
	r := valid(t)
	r.Sim.RetrieverStyle = "e5"
	err := r.Validate()
	if err == nil || !strings.Contains(err.Error(), `sim.retriever_style: must be one of dense, bm25, got "e5"`) {
		t.Fatalf("e5: %v", err)
	}
}
