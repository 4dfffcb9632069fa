package results

import (
	"fmt"
	"github.com/hindsearch/hindsearch/recipes"
	"io"
	"math"
	"strings"
	"unicode/utf8"
)

// DefaultRenderWidth is the column at which RenderTrajectory wraps text
// when RenderOptions.Width is 0.
const DefaultRenderWidth = 100

// RenderOptions say how trajectories are printed.
type RenderOptions struct {
	// Color selects ANSI colours (for a terminal): OPD terms become
	// background colours scaled by value. Without it the output is plain
	// text with the terms written out.
	Color bool
	// Width is the wrap column (DefaultRenderWidth when 0). Words longer
	// than a line are not broken.
	Width int
}

func (o RenderOptions) width() int {
	if o.Width <= 0 {
		return DefaultRenderWidth
	}
	return o.Width
}

// ANSI SGR parameters of the styles used.
const (
	sgrBold   = "1"
	sgrDim    = "2"
	sgrHead   = "1;36"
	sgrRed    = "31"
	sgrGreen  = "32"
	sgrYellow = "33"
)

// opdScale is the |OPD term| at which the colour scale saturates (the
// default hindsight.clamp).
const opdScale = 1.0

// opdGreens and opdReds are the 256-colour backgrounds of positive and
// negative terms, weakest first.
var (
	opdGreens = []int{22, 28, 34, 40, 46}
	opdReds   = []int{52, 88, 124, 160, 196}
)

// opdStyle is the SGR style of a token whose OPD term is v (non-zero):
// a background of five steps of green (positive) or red (negative) up to
// opdScale, with a foreground that stays readable on it.
func opdStyle(v float64) string {
	level := int(math.Ceil(math.Abs(v) / opdScale * 5))
	level = min(max(level, 1), 5)
	bg := opdGreens[level-1]
	if v < 0 {
		bg = opdReds[level-1]
	}
	fg := 15
	if level >= 4 {
		fg = 16
	}
	return fmt.Sprintf("48;5;%d;38;5;%d", bg, fg)
}

// fmtOPD formats an OPD term for display: two decimals, or two significant
// digits for terms below 0.01 so that they do not read as zero.
func fmtOPD(v float64) string {
	if v != 0 && math.Abs(v) < 0.005 {
		return fmt.Sprintf("%+.1e", v)
	}
	return fmt.Sprintf("%+.2f", v)
}

// RenderLegend writes the one-line key to the OPD markings of
// RenderTrajectory in opts' style.
func RenderLegend(w io.Writer, opts RenderOptions) error {
	var b strings.Builder
	if opts.Color {
		b.WriteString("OPD term: ")
		for _, v := range []float64{-1, -0.6, -0.2, 0.2, 0.6, 1} {
			b.WriteString(sgr(opdStyle(v), " "+fmtOPD(v)+" "))
		}
		b.WriteString(" (|v| ≥ 1 saturates; " + sgr(sgrDim, "⟨v⟩") + " ends a run of tokens; uncoloured: 0)\n")
	} else {
		b.WriteString("OPD term: ⟦tokens⟧⟨+0.50⟩ marks a run of policy tokens sharing a non-zero term; unmarked: 0\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// sgr wraps text in the ANSI style s (no-op for an empty style).
func sgr(s, text string) string {
	if s == "" || text == "" {
		return text
	}
	return "\x1b[" + s + "m" + text + "\x1b[0m"
}

// RenderTrajectory writes one trajectory turn by turn: a header naming it,
// the question and gold answers, then each turn's policy text (think,
// search, answer) with its query, the titles retrieved and the answer,
// then the outcome (reward, F1, advantage, finish reason), the critique or
// why there is none, and a summary of the OPD term. When the record has
// Pieces, the policy text is printed token by token with the OPD term
// marked on every token that has a non-zero one (see RenderLegend);
// without Pieces each turn's text is printed whole, followed by its OPD
// summary.
func RenderTrajectory(w io.Writer, t *TrajectoryRecord, opts RenderOptions) error {
	r := &trajPrinter{opts: opts}
	r.trajectory(t)
	_, err := io.WriteString(w, r.b.String())
	return err
}

// trajPrinter accumulates the output of one trajectory.
type trajPrinter struct {
	b    strings.Builder
	opts RenderOptions
}

// style returns text in style s when colour is on.
func (r *trajPrinter) style(s, text string) string {
	if !r.opts.Color {
		return text
	}
	return sgr(s, text)
}

// para writes label then text, wrapped at the render width, continuation
// lines indented by indent.
func (r *trajPrinter) para(indent, label, labelStyle, text string) {
	ww := r.wrapper(indent)
	ww.col = utf8.RuneCountInString(indent)
	r.b.WriteString(indent)
	if label != "" {
		ww.write(label, labelStyle)
		ww.write(" ", "")
	}
	ww.write(text, "")
	ww.end()
}

func (r *trajPrinter) wrapper(indent string) *wrapper {
	return &wrapper{b: &r.b, color: r.opts.Color, indent: indent, width: r.opts.width()}
}

func (r *trajPrinter) trajectory(t *TrajectoryRecord) {
	r.b.WriteString(r.style(sgrBold, fmt.Sprintf("=== %s · step %d · group %d · sample %d · model %s", clean(t.ID), t.Step, t.Group, t.Sample, clean(t.Model))))
	r.b.WriteString("\n")
	q := t.Question
	where := strings.TrimSpace(q.Dataset + " " + q.ID)
	label := "question:"
	if where != "" {
		label = "question (" + where + "):"
	}
	r.para("    ", label, sgrBold, q.Question)
	golds := "(none)"
	if len(q.Golds) > 0 {
		golds = strings.Join(q.Golds, " | ")
	}
	r.para("    ", "gold:", sgrBold, golds)

	spans := t.PolicySpans()
	perToken := len(t.Pieces) == len(t.Tokens) && len(t.Pieces) > 0
	for i, turn := range t.Turns {
		action := turn.Action
		if action == "" {
			action = "invalid (neither search nor answer)"
		}
		head := fmt.Sprintf("turn %d · %s", i+1, action)
		if turn.Finish != "" && turn.Finish != "stop" {
			head += " · finish " + turn.Finish
		}
		head += turnFlags(turn)
		r.b.WriteString(r.style(sgrHead, head) + "\n")
		if perToken && i < len(spans) {
			r.tokens(t, spans[i])
		} else {
			r.para("    ", "", "", turn.Text)
			if i < len(spans) && len(t.OPD) == len(t.Tokens) {
				if s := opdSummary(t, spans[i]); s != "" {
					r.para("    ", "opd:", sgrBold, s)
				}
			}
		}
		switch turn.Action {
		case "search":
			r.para("    ", "query:", sgrBold, turn.Content)
			if turn.RetrievalError != "" {
				r.para("    ", "retrieval failed:", sgrBold, turn.RetrievalError)
			}
			titles := "(none)"
			if len(turn.Titles) > 0 {
				titles = strings.Join(turn.Titles, "; ")
			}
			r.para("    ", "retrieved:", sgrBold, titles)
		case "answer":
			r.para("    ", "answer:", sgrBold, turn.Content)
		}
	}

	outcome, outStyle := "solved", sgrGreen
	if t.Failed() {
		outcome, outStyle = "failed", sgrRed
	}
	answer := "(none)"
	if t.Answered {
		answer = fmt.Sprintf("%q", t.Answer)
	}
	ww := r.wrapper("    ")
	ww.write(outcome, outStyle)
	ww.write(fmt.Sprintf(" · reward %.2f · F1 %.2f · advantage %+.2f · finish %s · answer %s", t.Reward, t.F1, t.Advantage, t.Finish, answer), "")
	ww.end()
	switch {
	case t.Critique != "" && t.HintFrom == recipes.HintSiblings:
		r.para("    ", "sibling hint:", sgrYellow, t.Critique)
	case t.Critique != "":
		r.para("    ", "critique:", sgrYellow, t.Critique)
	case t.CritiqueError != "":
		r.para("    ", "critique error:", sgrRed, t.CritiqueError)
	case t.Failed():
		r.para("    ", "critique:", sgrYellow, "(none)")
	}
	if t.OPD == nil {
		r.para("    ", "opd:", sgrBold, "none (no OPD term)")
	} else {
		s := opdSummary(t, [2]int{0, len(t.Tokens)})
		if s == "" {
			s = "0 on every token"
		}
		r.para("    ", "opd:", sgrBold, s)
	}
	if !perToken && len(t.Turns) > 0 {
		ww = r.wrapper("    ")
		r.b.WriteString("    ")
		ww.col = 4
		ww.write("(no per-token text in this record: OPD summarised per turn)", sgrDim)
		ww.end()
	}
}

// tokens writes the policy tokens of span, each run of tokens that share a
// non-zero OPD term marked with it.
func (r *trajPrinter) tokens(t *TrajectoryRecord, span [2]int) {
	ww := r.wrapper("    ")
	r.b.WriteString("    ")
	ww.col = 4
	hasOPD := len(t.OPD) == len(t.Tokens)
	key := func(i int) string {
		if !hasOPD || t.OPD[i] == 0 {
			return ""
		}
		return fmtOPD(t.OPD[i])
	}
	for i := span[0]; i < span[1]; {
		k := key(i)
		j := i + 1
		for j < span[1] && key(j) == k {
			j++
		}
		if k == "" {
			for n := i; n < j; n++ {
				ww.write(t.Pieces[n], "")
			}
		} else {
			// The run's text, its outer whitespace outside the marks; a run
			// of whitespace alone is shown with visible symbols.
			var text strings.Builder
			for n := i; n < j; n++ {
				text.WriteString(t.Pieces[n])
			}
			full := text.String()
			body := strings.TrimSpace(full)
			lead, trail := "", ""
			if body == "" {
				body = strings.NewReplacer(" ", "␣", "\n", "↵", "\t", "⇥", "\r", "↵").Replace(full)
			} else {
				lead = full[:strings.Index(full, body)]
				trail = full[len(lead)+len(body):]
			}
			ww.write(lead, "")
			if r.opts.Color {
				// The run's tokens share a term to two decimals: one colour.
				ww.write(body, opdStyle(t.OPD[i]))
				ww.write("⟨"+k+"⟩", sgrDim)
			} else {
				ww.write("⟦"+body+"⟧⟨"+k+"⟩", "")
			}
			ww.write(trail, "")
		}
		i = j
	}
	ww.end()
}

// opdSummary describes the OPD terms of the policy tokens in span: how
// many search and other policy tokens have a non-zero term, their sum and
// range; "" when the record has no terms or span no policy tokens.
func opdSummary(t *TrajectoryRecord, span [2]int) string {
	if len(t.OPD) != len(t.Tokens) {
		return ""
	}
	var search, searchNZ, other, otherNZ int
	sum, lo, hi := 0.0, math.Inf(1), math.Inf(-1)
	for i := span[0]; i < span[1]; i++ {
		if !t.Policy[i] {
			continue
		}
		v := t.OPD[i]
		if t.Search[i] {
			search++
		} else {
			other++
		}
		if v == 0 {
			continue
		}
		if t.Search[i] {
			searchNZ++
		} else {
			otherNZ++
		}
		sum += v
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	if search+searchNZ+otherNZ == 0 {
		return ""
	}
	s := fmt.Sprintf("non-zero on %d of %d search tokens", searchNZ, search)
	if searchNZ+otherNZ == 0 {
		s = fmt.Sprintf("0 on all %d search tokens", search)
	}
	if otherNZ > 0 {
		s += fmt.Sprintf(" and %d of %d other policy tokens", otherNZ, other)
	}
	switch {
	case searchNZ+otherNZ == 0:
	case lo == hi:
		s += fmt.Sprintf(", each %s", fmtOPD(lo))
	default:
		s += fmt.Sprintf(", sum %s, range %s to %s", fmtOPD(sum), fmtOPD(lo), fmtOPD(hi))
	}
	return s
}

// wrapper lays styled text out in lines of at most width runes, breaking
// at spaces; continuation lines start with indent. Newlines in the text
// break lines (trailing ones are dropped); runs of spaces are kept within
// a line and dropped at a break.
type wrapper struct {
	b      *strings.Builder
	color  bool
	indent string
	width  int
	// col is the current column (runes written on the line).
	col int
	// word is the pending word, wordLen its length in runes.
	word    []styled
	wordLen int
	// spaces are the pending spaces before word; newlines the pending
	// line breaks.
	spaces   []styled
	newlines int
	// open is the style in effect on the output (colour only).
	open string
}

type styled struct{ text, style string }

// visible returns c, or for a control character (which could drive the
// terminal: escape sequences in a model's output) its Unicode picture.
func visible(c rune) string {
	switch {
	case c < 0x20:
		return string(rune(0x2400 + c))
	case c == 0x7f:
		return "\u2421"
	case c >= 0x80 && c < 0xa0:
		return "\ufffd"
	}
	return string(c)
}

// clean makes every character of s visible (see visible), newlines and
// tabs included.
func clean(s string) string {
	var b strings.Builder
	for _, c := range s {
		b.WriteString(visible(c))
	}
	return b.String()
}

// emit writes s, switching styles only where they change.
func (w *wrapper) emit(s styled) {
	if w.color && s.style != w.open {
		w.close()
		if s.style != "" {
			w.b.WriteString("\x1b[" + s.style + "m")
		}
		w.open = s.style
	}
	w.b.WriteString(s.text)
}

// close ends the style in effect, if any.
func (w *wrapper) close() {
	if w.open != "" {
		w.b.WriteString("\x1b[0m")
		w.open = ""
	}
}

// newline ends the line (and its style) and indents the next.
func (w *wrapper) newline() {
	w.close()
	w.b.WriteString("\n" + w.indent)
	w.col = utf8.RuneCountInString(w.indent)
	w.spaces = nil
}

// write adds text in style (ignored without colour).
func (w *wrapper) write(text, style string) {
	for _, c := range text {
		switch c {
		case '\n':
			w.flush()
			w.spaces = nil
			w.newlines++
		case ' ', '\t':
			w.flush()
			w.spaces = append(w.spaces, styled{" ", style})
		default:
			if n := len(w.word); n > 0 && w.word[n-1].style == style {
				w.word[n-1].text += visible(c)
			} else {
				w.word = append(w.word, styled{visible(c), style})
			}
			w.wordLen++
		}
	}
}

// flush writes the pending word, after the pending line breaks and spaces
// (or a break, when it would overflow the line).
func (w *wrapper) flush() {
	if w.wordLen == 0 {
		return
	}
	for ; w.newlines > 0; w.newlines-- {
		w.newline()
	}
	start := utf8.RuneCountInString(w.indent)
	if w.col > start && w.col+len(w.spaces)+w.wordLen > w.width {
		w.newline()
	}
	if w.col == start {
		w.spaces = nil // no leading spaces on a line
	}
	for _, s := range w.spaces {
		w.emit(s)
		w.col++
	}
	for _, s := range w.word {
		w.emit(s)
	}
	w.col += w.wordLen
	w.word, w.wordLen, w.spaces = w.word[:0], 0, nil
}

// end flushes the last word and ends the line.
func (w *wrapper) end() {
	w.flush()
	w.close()
	w.b.WriteString("\n")
}

// turnFlags says what the step health counted of a turn: its think
// tokens, a repeated query, a cut at its token cap or of the observation
// after it, a gold answer in the passages it was shown.
func turnFlags(turn TurnRecord) string {
	var b strings.Builder
	if turn.ThinkTokens > 0 {
		fmt.Fprintf(&b, " · think %d tokens", turn.ThinkTokens)
	}
	if turn.Repeated {
		b.WriteString(" · REPEATED QUERY")
	}
	if turn.Cut != "" {
		b.WriteString(" · CUT at " + strings.ReplaceAll(turn.Cut, "_", " "))
	}
	if turn.ObsCut {
		b.WriteString(" · observation cut at rollout.max_obs_tokens")
	}
	if turn.GoldRetrieved {
		b.WriteString(" · gold answer in the passages")
	}
	return b.String()
}
