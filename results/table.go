package results

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// canonical is the column order of the Search-R1 benchmarks, with their
// display headers, as papers in the field print them.
var canonical = []struct{ name, header string }{
	{"nq", "NQ"},
	{"triviaqa", "TriviaQA"},
	{"popqa", "PopQA"},
	{"hotpotqa", "HotpotQA"},
	{"2wikimultihopqa", "2Wiki"},
	{"musique", "MuSiQue"},
	{"bamboogle", "Bamboogle"},
}

// EvalRow is the evaluation of one strategy at one step over all datasets.
type EvalRow struct {
	// Step is the evaluation step.
	Step int
	// Strategy is the evaluation strategy.
	Strategy string
	// EM maps a dataset name to its exact-match rate (a fraction).
	EM map[string]float64
	// F1 maps a dataset name to its mean token F1 (a fraction).
	F1 map[string]float64
	// AvgEM is the mean of EM over the row's datasets.
	AvgEM float64
	// AvgF1 is the mean of F1 over the row's datasets.
	AvgF1 float64
}

// Summarise groups records into one row per (step, strategy), ordered by
// step and, within a step, by the strategy's first appearance in recs. When
// a (step, strategy, dataset) occurs more than once, the last record wins
// (a re-run evaluation replaces the earlier one). The averages are plain
// means over the datasets present in the row.
func Summarise(recs []EvalRecord) []EvalRow {
	type key struct {
		step     int
		strategy string
	}
	idx := map[key]int{}
	var rows []EvalRow
	for _, r := range recs {
		k := key{r.Step, r.Strategy}
		i, ok := idx[k]
		if !ok {
			i = len(rows)
			idx[k] = i
			rows = append(rows, EvalRow{
				Step:     r.Step,
				Strategy: r.Strategy,
				EM:       map[string]float64{},
				F1:       map[string]float64{},
			})
		}
		rows[i].EM[r.Dataset] = r.EM
		rows[i].F1[r.Dataset] = r.F1
	}
	for i := range rows {
		row := &rows[i]
		var em, f1 float64
		// Sum in a fixed order so the averages are bit-for-bit reproducible.
		for _, ds := range slices.Sorted(maps.Keys(row.EM)) {
			em += row.EM[ds]
			f1 += row.F1[ds]
		}
		if n := float64(len(row.EM)); n > 0 {
			row.AvgEM, row.AvgF1 = em/n, f1/n
		}
	}
	sort.SliceStable(rows, func(a, b int) bool { return rows[a].Step < rows[b].Step })
	return rows
}

// datasetColumns returns the dataset names present in recs in column order
// (canonical benchmarks first, then the others alphabetically) and their
// headers.
func datasetColumns(recs []EvalRecord) (names, headers []string) {
	present := map[string]bool{}
	for _, r := range recs {
		present[r.Dataset] = true
	}
	return orderColumns(present)
}

// orderColumns puts the dataset names of present (which it empties) in
// column order, canonical benchmarks first, then the others alphabetically,
// and returns them with their headers.
func orderColumns(present map[string]bool) (names, headers []string) {
	for _, c := range canonical {
		if present[c.name] {
			names = append(names, c.name)
			headers = append(headers, c.header)
			delete(present, c.name)
		}
	}
	var rest []string
	for name := range present {
		rest = append(rest, name)
	}
	slices.Sort(rest)
	return append(names, rest...), append(headers, rest...)
}

// newTable returns a plain ASCII table on w that prints headers exactly as
// given, never wraps cells, and right-aligns cells except in the columns
// listed in left.
func newTable(w io.Writer, left ...int) *tablewriter.Table {
	align := tw.CellAlignment{Global: tw.AlignRight}
	for _, c := range left {
		for len(align.PerColumn) <= c {
			align.PerColumn = append(align.PerColumn, tw.Skip)
		}
		align.PerColumn[c] = tw.AlignLeft
	}
	return tablewriter.NewTable(w,
		tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{
			Symbols: tw.NewSymbols(tw.StyleASCII),
		})),
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithHeaderAlignment(tw.AlignCenter),
		tablewriter.WithHeaderAutoWrap(tw.WrapNone),
		tablewriter.WithRowAutoFormat(tw.Off),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
		tablewriter.WithRowAlignmentConfig(align),
	)
}

// pct formats a fraction as a percentage with one decimal.
func pct(v float64) string { return fmt.Sprintf("%.1f", 100*v) }

// EvalTable prints the exact-match table of recs to w: one row per
// (step, strategy) in step order, one column per dataset plus "avg", cells
// as percentages with one decimal ("-" where a dataset was not evaluated).
// A non-empty caption is printed verbatim on the line under the table.
func EvalTable(w io.Writer, recs []EvalRecord, caption string) error {
	names, headers := datasetColumns(recs)
	t := newTable(w, 1)
	header := append([]any{"step", "strategy"}, toAny(headers)...)
	t.Header(append(header, "avg")...)
	for _, row := range Summarise(recs) {
		cells := []string{fmt.Sprint(row.Step), row.Strategy}
		for _, ds := range names {
			if v, ok := row.EM[ds]; ok {
				cells = append(cells, pct(v))
			} else {
				cells = append(cells, "-")
			}
		}
		cells = append(cells, pct(row.AvgEM))
		if err := t.Append(cells); err != nil {
			return fmt.Errorf("eval table: %w", err)
		}
	}
	if err := t.Render(); err != nil {
		return fmt.Errorf("eval table: %w", err)
	}
	if caption != "" {
		if _, err := fmt.Fprintln(w, caption); err != nil {
			return fmt.Errorf("eval table: %w", err)
		}
	}
	return nil
}

// phases are the phase columns of StepsTable, in order.
var phases = []string{"rollout", "judge", "teacher", "train", "sync", "eval"}

// StepsTable prints one row per step record to w, in the order given: step,
// mean reward, failed trajectories, critiques, OPD tokens and the seconds of
// each phase (rollout, judge, teacher, train, sync, eval) with two decimals
// ("-" for a phase the step did not record).
func StepsTable(w io.Writer, recs []StepRecord) error {
	t := newTable(w)
	header := []any{"step", "reward", "failed", "critiques", "opd tokens"}
	t.Header(append(header, toAny(phases)...)...)
	for _, r := range recs {
		cells := []string{
			fmt.Sprint(r.Step),
			fmt.Sprintf("%.3f", r.RewardMean),
			fmt.Sprint(r.Failed),
			fmt.Sprint(r.Critiques),
			fmt.Sprint(r.OPDTokens),
		}
		for _, p := range phases {
			if v, ok := r.PhaseSeconds[p]; ok {
				cells = append(cells, fmt.Sprintf("%.2f", v))
			} else {
				cells = append(cells, "-")
			}
		}
		if err := t.Append(cells); err != nil {
			return fmt.Errorf("steps table: %w", err)
		}
	}
	if err := t.Render(); err != nil {
		return fmt.Errorf("steps table: %w", err)
	}
	return nil
}

// toAny converts strings to the []any that tablewriter's Header takes.
func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
