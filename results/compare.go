package results

import (
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Formats lists the formats CompareTable prints.
func Formats() []string { return []string{"table", "markdown", "csv"} }

// CompareTable prints rows side by side to w in format:
//
//   - "table": an ASCII table with the columns run, step, strategy, one per
//     dataset (NQ, TriviaQA, PopQA, HotpotQA, 2Wiki, MuSiQue, Bamboogle,
//     then the others alphabetically, as in EvalTable) and avg; cells are EM
//     percentages with one decimal, "-" where a row has no value.
//   - "markdown": a GitHub pipe table with the same columns; a cell with a
//     confidence interval reads "39.4 [35.1, 43.9]". Footnote lines under
//     it, each a paragraph of its own, give the number of questions per
//     dataset (once when every row has the same) and say what the
//     intervals are; the caption follows after a
//     blank line.
//   - "csv": a header run,step,strategy, then <dataset>_em, <dataset>_lo,
//     <dataset>_hi for each dataset (its lower-case name), then avg_em,
//     avg_lo, avg_hi; EM and bounds as fractions with four decimals, empty
//     where missing.
//
// A row with a negative Step (a reference row) prints "-" (csv: empty) as
// its step. A non-empty caption is printed verbatim under a table or
// markdown table; csv output has no caption. Any other format is an error.
func CompareTable(w io.Writer, rows []RunSummary, format string, caption string) error {
	present := map[string]bool{}
	for _, r := range rows {
		for ds := range r.EM {
			present[ds] = true
		}
	}
	names, headers := orderColumns(present)
	var err error
	switch format {
	case "table":
		err = compareASCII(w, rows, names, headers)
	case "markdown":
		err = compareMarkdown(w, rows, names, headers)
	case "csv":
		return compareCSV(w, rows, names)
	default:
		return fmt.Errorf("compare table: unknown format %q (known: %s)", format, strings.Join(Formats(), ", "))
	}
	if err != nil {
		return fmt.Errorf("compare table: %w", err)
	}
	if caption != "" {
		if format == "markdown" {
			// A text line right under a pipe table would be read as a row.
			caption = "\n" + caption
		}
		if _, err := fmt.Fprintln(w, caption); err != nil {
			return fmt.Errorf("compare table: %w", err)
		}
	}
	return nil
}

// stepCell prints a row's step, or dash for a reference row.
func stepCell(r RunSummary, dash string) string {
	if r.Step < 0 {
		return dash
	}
	return strconv.Itoa(r.Step)
}

// dashIfEmpty returns s, or "-" for "".
func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func compareASCII(w io.Writer, rows []RunSummary, names, headers []string) error {
	t := newTable(w, 0, 2)
	header := append([]any{"run", "step", "strategy"}, toAny(headers)...)
	t.Header(append(header, "avg")...)
	for _, r := range rows {
		cells := []string{r.Name, stepCell(r, "-"), dashIfEmpty(r.Strategy)}
		for _, ds := range names {
			if v, ok := r.EM[ds]; ok {
				cells = append(cells, pct(v))
			} else {
				cells = append(cells, "-")
			}
		}
		cells = append(cells, pct(r.AvgEM))
		if err := t.Append(cells); err != nil {
			return err
		}
	}
	return t.Render()
}

// mdEscape makes s safe inside a markdown table cell.
func mdEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, "|", `\|`, "\n", " ").Replace(s)
}

// withCI prints an EM percentage, followed by its interval when ok.
func withCI(v float64, ci [2]float64, ok bool) string {
	if !ok || !validCI(ci) {
		return pct(v)
	}
	return fmt.Sprintf("%s [%s, %s]", pct(v), pct(ci[0]), pct(ci[1]))
}

func compareMarkdown(w io.Writer, rows []RunSummary, names, headers []string) error {
	var b strings.Builder
	cols := append(append([]string{"run", "step", "strategy"}, headers...), "avg")
	b.WriteString("|")
	for _, c := range cols {
		b.WriteString(" " + mdEscape(c) + " |")
	}
	b.WriteString("\n|")
	for i := range cols {
		if i == 0 || i == 2 {
			b.WriteString(" :--- |")
		} else {
			b.WriteString(" ---: |")
		}
	}
	b.WriteString("\n")
	anyCI := false
	var notes, counts []string
	for _, r := range rows {
		cells := []string{mdEscape(r.Name), stepCell(r, "-"), mdEscape(dashIfEmpty(r.Strategy))}
		var ns []string
		for i, ds := range names {
			v, ok := r.EM[ds]
			if !ok {
				cells = append(cells, "-")
				continue
			}
			ci, hasCI := r.CI[ds]
			anyCI = anyCI || hasCI
			cells = append(cells, withCI(v, ci, hasCI))
			if n, ok := r.N[ds]; ok && n > 0 {
				ns = append(ns, fmt.Sprintf("%s %d", headers[i], n))
			}
		}
		anyCI = anyCI || r.HasCI
		cells = append(cells, withCI(r.AvgEM, r.AvgCI, r.HasCI))
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
		if len(ns) > 0 {
			label := r.Name
			if r.Step >= 0 {
				label += fmt.Sprintf(", step %d", r.Step)
			}
			if r.Strategy != "" {
				label += ", " + r.Strategy
			}
			notes = append(notes, label+": "+strings.Join(ns, ", "))
			counts = append(counts, strings.Join(ns, ", "))
		}
	}
	switch {
	case len(counts) > 1 && len(slices.Compact(slices.Clone(counts))) == 1:
		// Every row evaluated the same questions: say it once.
		b.WriteString("\nn (questions per dataset, same in every run row): " + counts[0] + ".\n")
	case len(notes) > 0:
		b.WriteString("\nn (questions per dataset): " + strings.Join(notes, "; ") + ".\n")
	}
	if anyCI {
		b.WriteString("\nEM in %; [lo, hi] is the 95% percentile-bootstrap confidence interval over questions (avg: datasets resampled independently).\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func compareCSV(w io.Writer, rows []RunSummary, names []string) error {
	cw := csv.NewWriter(w)
	header := []string{"run", "step", "strategy"}
	for _, ds := range names {
		header = append(header, ds+"_em", ds+"_lo", ds+"_hi")
	}
	header = append(header, "avg_em", "avg_lo", "avg_hi")
	if err := cw.Write(header); err != nil {
		return fmt.Errorf("compare table: %w", err)
	}
	frac := func(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }
	bounds := func(ci [2]float64, ok bool) []string {
		if !ok || !validCI(ci) {
			return []string{"", ""}
		}
		return []string{frac(ci[0]), frac(ci[1])}
	}
	for _, r := range rows {
		rec := []string{r.Name, stepCell(r, ""), r.Strategy}
		for _, ds := range names {
			v, ok := r.EM[ds]
			if !ok {
				rec = append(rec, "", "", "")
				continue
			}
			ci, hasCI := r.CI[ds]
			rec = append(append(rec, frac(v)), bounds(ci, hasCI)...)
		}
		rec = append(append(rec, frac(r.AvgEM)), bounds(r.AvgCI, r.HasCI)...)
		if err := cw.Write(rec); err != nil {
			return fmt.Errorf("compare table: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("compare table: %w", err)
	}
	return nil
}
