package results

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
)

// QuestionsDir is the subdirectory of a run directory that holds the
// per-question evaluation records, one file per (step, strategy).
const QuestionsDir = "questions"

// QuestionRecord is the score of one evaluated question: one line of
// questions/<strategy>-step-NNNN.jsonl. The per-question scores are what
// the confidence intervals of a run's summary are computed from.
type QuestionRecord struct {
	// Step is the training step the evaluated weights come from.
	Step int `json:"step"`
	// Strategy names the evaluation method (e.g. "greedy").
	Strategy string `json:"strategy"`
	// Dataset is the benchmark name (e.g. "nq").
	Dataset string `json:"dataset"`
	// ID identifies the question within its dataset.
	ID string `json:"id"`
	// EM is the question's exact match, 0 or 1.
	EM float64 `json:"em"`
	// F1 is the question's token F1.
	F1 float64 `json:"f1"`
	// Answer is the answer the agent gave ("" when it gave none).
	Answer string `json:"answer"`
}

// QuestionsFile returns the name, relative to the run directory, of the
// per-question records of strategy at step: questions/<strategy>-step-NNNN.jsonl
// (the step zero-padded to at least four digits).
func QuestionsFile(step int, strategy string) string {
	return filepath.Join(QuestionsDir, fmt.Sprintf("%s-step-%04d.jsonl", strategy, step))
}

// checkStrategy rejects strategy names that cannot be part of a file name.
func checkStrategy(strategy string) error {
	if strategy == "" || strategy == "." || strategy == ".." || strings.ContainsAny(strategy, `/\`+"\x00") {
		return fmt.Errorf("questions: strategy %q cannot name a file", strategy)
	}
	return nil
}

// WriteQuestions replaces the per-question records of strategy at step
// (QuestionsFile) with recs, atomically (WriteFileAtomic), one JSON object
// per line in the order given. A record whose Step is 0 or whose Strategy
// is empty is written with step and strategy filled in; a record naming
// another step or strategy is an error, and nothing is written.
func (d *RunDir) WriteQuestions(step int, strategy string, recs []QuestionRecord) error {
	if err := checkStrategy(strategy); err != nil {
		return err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for i, r := range recs {
		if r.Step == 0 {
			r.Step = step
		}
		if r.Strategy == "" {
			r.Strategy = strategy
		}
		if r.Step != step || r.Strategy != strategy {
			return fmt.Errorf("questions: record %d is step %d strategy %q, want step %d strategy %q", i, r.Step, r.Strategy, step, strategy)
		}
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("questions: record %d: %w", i, err)
		}
	}
	return d.WriteFileAtomic(QuestionsFile(step, strategy), buf.Bytes())
}

// ReadQuestions reads the per-question records of strategy at step. A
// missing file reads as no records (nil, nil).
func (d *RunDir) ReadQuestions(step int, strategy string) ([]QuestionRecord, error) {
	if err := checkStrategy(strategy); err != nil {
		return nil, err
	}
	return readJSONL[QuestionRecord](filepath.Join(d.Path, QuestionsFile(step, strategy)))
}
