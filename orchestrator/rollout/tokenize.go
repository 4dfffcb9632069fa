package rollout

import (
	"strings"
	"unicode/utf8"

	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
)

// SearchTokenMask marks the sampled tokens ids of one turn that belong to
// its search span: the turn's first <search>...</search> action, tags
// included, found as format.ActionSpan finds it, in the ids' exact bytes
// under tb (never in the server's text offsets). A token belongs to the
// span when its bytes overlap it: the tokens of the tags count, and so
// does a token that straddles an end of the span, such as Qwen's ">\n\n"
// that ends "</search>" and runs past it. No token is marked when the
// bytes hold no search action first.
func SearchTokenMask(tb roles.IDBytes, ids []int) []bool {
	return searchTokenMask(tb, ids, string(roles.TurnBytes(tb, ids, make([]byte, 0, 4*len(ids)))))
}

// searchTokenMask is SearchTokenMask over the ids' bytes, text.
func searchTokenMask(tb roles.IDBytes, ids []int, text string) []bool {
	mask := make([]bool, len(ids))
	if kind, _, start, end := format.ActionSpan(text); kind == format.ActionSearch {
		overlapping(tb, ids, start, end, func(j int) { mask[j] = true })
	}
	return mask
}

// overlapping calls mark with the index of each of ids whose bytes under
// tb overlap the byte range [start, end) of their concatenation.
func overlapping(tb roles.IDBytes, ids []int, start, end int, mark func(j int)) {
	off := 0
	for j, id := range ids {
		if off >= end {
			return
		}
		b, _ := tb.TokenBytes(id)
		from, to := off, off+len(b)
		off = to
		if to > start && from < end {
			mark(j)
		}
	}
}

// ThinkTokenCount counts the sampled ids of one turn that belong to its
// reasoning: the first "<think>" to the "</think>" after it (to the
// turn's end when it never closes), tags included, in the ids' exact
// bytes under tb. A token counts when its bytes overlap the span, as in
// SearchTokenMask. 0 when the turn holds no "<think>".
func ThinkTokenCount(tb roles.IDBytes, ids []int) int {
	return thinkTokenCount(tb, ids, string(roles.TurnBytes(tb, ids, make([]byte, 0, 4*len(ids)))))
}

// thinkTokenCount is ThinkTokenCount over the ids' bytes, text.
func thinkTokenCount(tb roles.IDBytes, ids []int, text string) int {
	start := strings.Index(text, "<think>")
	if start < 0 {
		return 0
	}
	end := len(text)
	if j := strings.Index(text[start:], "</think>"); j >= 0 {
		end = start + j + len("</think>")
	}
	n := 0
	overlapping(tb, ids, start, end, func(int) { n++ })
	return n
}

// TokenPieces returns the text of each of t's tokens, for orchestrate
// show: a policy token's is the exact bytes of its id under tb, an
// environment token's "". Bytes are shown where they complete a UTF-8
// character: a character split over several tokens is shown whole on the
// token holding its last byte (the tokens before get ""), as a streaming
// detokenizer shows it, so that every piece is valid UTF-8 and the pieces
// of a turn concatenate to its text. A byte that can start no character,
// and the bytes of a character a turn ends inside, are shown as U+FFFD,
// one per byte (as the record's text is written).
func TokenPieces(tb roles.IDBytes, t *Trajectory) []string {
	pieces := make([]string, len(t.Tokens))
	var pending []byte // bytes of an unfinished character
	last := -1         // the policy token that added the last pending byte
	flush := func() {
		if len(pending) > 0 && last >= 0 {
			pieces[last] += strings.Repeat(string(utf8.RuneError), len(pending))
		}
		pending = pending[:0]
	}
	var b strings.Builder
	for i, id := range t.Tokens {
		if i >= len(t.Policy) || !t.Policy[i] {
			flush()
			continue
		}
		tok, _ := tb.TokenBytes(id)
		pending = append(pending, tok...)
		last = i
		b.Reset()
		k := 0
		for k < len(pending) && utf8.FullRune(pending[k:]) {
			r, size := utf8.DecodeRune(pending[k:])
			if r == utf8.RuneError && size == 1 {
				b.WriteRune(utf8.RuneError)
			} else {
				b.Write(pending[k : k+size])
			}
			k += size
		}
		pieces[i] = b.String()
		pending = append(pending[:0], pending[k:]...)
	}
	flush()
	return pieces
}
