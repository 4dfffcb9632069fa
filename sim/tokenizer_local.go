package sim

// The methods and names here let a process use the simulator's tokenizer as
// its local tokenizer (the orchestrator's policy.tokenizer for embedded
// policies): exact bytes per id, in-process encoding, and the chat template
// the simulated policy's /tokenize applies.

// ChatMessage is one message of the simulated chat template (ChatTemplate).
type ChatMessage = chatMessage

// TokenBytes returns the exact bytes of token id (a piece, a special
// token's text or a single byte, which may be part of a UTF-8 character);
// ok is false for an id outside the vocabulary. The slice is shared: do not
// modify it.
func (tk *Tokenizer) TokenBytes(id int) ([]byte, bool) {
	if id < 0 || id >= len(tk.raw) {
		return nil, false
	}
	return tk.raw[id], true
}

// AppendEncode appends the ids of text (as Encode) to dst and returns the
// extended slice.
func (tk *Tokenizer) AppendEncode(dst []int, text string) []int {
	splitPieces(text, func(p string) {
		if id, ok := tk.ids[p]; ok {
			dst = append(dst, id)
			return
		}
		for i := 0; i < len(p); i++ {
			dst = append(dst, tk.byteBase+int(p[i]))
		}
	})
	return dst
}

// rawPieces lays the pieces' bytes out in one array, for TokenBytes.
func rawPieces(pieces []string) [][]byte {
	n := 0
	for _, p := range pieces {
		n += len(p)
	}
	arena := make([]byte, 0, n)
	out := make([][]byte, len(pieces))
	for i, p := range pieces {
		start := len(arena)
		arena = append(arena, p...)
		out[i] = arena[start:len(arena):len(arena)]
	}
	return out
}
