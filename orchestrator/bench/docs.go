package bench

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strings"
)

// The markers around the region of a Markdown file that WriteDocs owns.
const (
	DocsBegin = "<!-- bench-figures:begin (written by make bench-docs; edits here are lost) -->"
	DocsEnd   = "<!-- bench-figures:end -->"
)

// Provenance says what a report was measured with, for the documents:
// the commit (with "-dirty" when the tree had changes outside the
// documents written), the command and when.
type Provenance struct {
	Commit  string
	Command string
	Date    string
}

// DocsFigures renders a report as the Markdown region WriteDocs puts
// between the markers: the figures with their range over seeds and
// target, what they were measured at, and the CPU figures' work lines.
func DocsFigures(r *Report, p Provenance) string {
	var b strings.Builder
	b.WriteString(DocsBegin + "\n\n")
	b.WriteString("| figure | value | range over seeds | target | measured as |\n|---|---|---|---|---|\n")
	for _, t := range benchTargets {
		v := t.get(r)
		if t.optional && v == 0 {
			continue
		}
		fmt.Fprintf(&b, "| `%s` | %.3f | %s | %s | %s |\n", t.key, v, r.rangeCell(t.key), t.target, t.scenario)
	}
	seeds := ""
	if s := r.seedsMeasured(); s != nil {
		seeds = fmt.Sprintf(" The scheduling figures are each the mean over recipe seeds %s; the range is the lowest and highest seed's.", seedList(s))
	}
	fmt.Fprintf(&b, "\nSIMULATED (the simulator's latency model). Measured at commit `%s` on %s, %d CPUs, by `%s` (%.0f s).%s\n",
		p.Commit, p.Date, runtime.NumCPU(), p.Command, r.Seconds, seeds)
	var work []string
	for _, k := range []string{"cpu", "cpu-local"} {
		if c := r.Scenarios[k]; c != nil {
			work = append(work, WorkLine(k, c))
		}
	}
	if len(work) > 0 {
		b.WriteString("\nThe work the CPU figures are per turn of:\n\n```\n" + strings.Join(work, "\n") + "\n```\n")
	}
	b.WriteString("\n" + DocsEnd)
	return b.String()
}

// WriteDocs replaces the region between DocsBegin and DocsEnd in the
// Markdown file at path with region (DocsFigures), leaving the rest of the
// file as it was. A file without exactly one pair of markers, in order, is
// an error naming it and is not written.
func WriteDocs(path, region string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	i := bytes.Index(old, []byte(DocsBegin))
	j := bytes.Index(old, []byte(DocsEnd))
	switch {
	case i < 0 || j < 0:
		return fmt.Errorf("%s: no bench figures region (a line %q, later a line %q)", path, DocsBegin, DocsEnd)
	case j < i:
		return fmt.Errorf("%s: %q comes before %q", path, DocsEnd, DocsBegin)
	case bytes.Count(old, []byte(DocsBegin)) > 1 || bytes.Count(old, []byte(DocsEnd)) > 1:
		return fmt.Errorf("%s: more than one bench figures region", path)
	}
	var out bytes.Buffer
	out.Write(old[:i])
	out.WriteString(region)
	out.Write(old[j+len(DocsEnd):])
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	// Written beside and renamed over, so that a failure leaves the file
	// as it was.
	tmp := path + ".bench-tmp"
	if err := os.WriteFile(tmp, out.Bytes(), fi.Mode().Perm()); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
