// Package tokenizer is a pure-Go Hugging Face byte-level BPE tokenizer: it
// loads a tokenizer.json of the GPT-2 / Qwen2 / Llama 3 family and encodes
// text to exactly the ids of Hugging Face tokenizers'
// encode(text, add_special_tokens=False), and decodes ids to their exact
// bytes. Qwen25 returns Qwen2.5's tokenizer, embedded in the binary.
//
// Encoding runs the steps of the Hugging Face pipeline in order:
//
//  1. Added tokens are matched whole in the raw text, before anything else:
//     at the leftmost position where one starts, the longest one wins (Hugging
//     Face's AddedVocabulary, Aho-Corasick leftmost-longest); the text between
//     them goes through the steps below, each piece on its own.
//  2. The normaliser: NFC (golang.org/x/text/unicode/norm, Unicode 15.0), or
//     none; each stretch between added tokens is normalised on its own.
//  3. The pre-tokenizer: a Sequence of a Split (regex, behavior Isolated,
//     invert false) and a ByteLevel (add_prefix_space false, use_regex false),
//     or a ByteLevel alone (add_prefix_space false, use_regex true: it splits
//     with GPT-2's regex, `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
//     ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`; SmolLM2's tokenizer, tested against
//     Hugging Face tokenizers' own ids). The Split regex must be Qwen2's
//     pattern (below) or Llama 3's (the same with \p{N}{1,3}; tested against
//     the regex only, there are no Llama 3 reference ids). All three run as
//     hand-written scanners with Oniguruma's
//     semantics (the engine Hugging Face tokenizers uses): \s is Unicode
//     White_Space (U+0085 included, U+FEFF not), \p{L} and \p{N} are Go's
//     Unicode tables (15.0), and (?i:'s) also matches "'ſ" (U+017F folds to
//     s). Tests hold the scanner equal to the regex run by
//     github.com/dlclark/regexp2.
//  4. BPE: the bytes of each piece are merged by merge rank (lowest first,
//     leftmost first among equal ranks), merges given as "a b" strings or
//     [a, b] pairs; ignore_merges (a piece that is a vocabulary entry is
//     that entry) is honoured. A byte the vocabulary has no token for is
//     dropped before merging, as Hugging Face's BPE drops a character it has
//     no id for when the model has no unk_token (SmolLM2's lacks six control
//     bytes); such a vocabulary with an unk_token is refused.
//
// Qwen2's pattern, as tokenizer.json has it:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Decoding is the ByteLevel decoder: each id's exact bytes, concatenated. A
// BPE token may hold part of a UTF-8 character, so Decode and TokenBytes
// return bytes, not strings.
//
// Not supported, refused by Parse with an error naming it: models other than
// BPE; BPE dropout, byte_fallback, continuing_subword_prefix or
// end_of_word_suffix; normalisers other than NFC; pre-tokenizers other than
// the two above (other Split patterns, behaviours or invert, ByteLevel
// with add_prefix_space); decoders other than
// ByteLevel; vocabulary entries that are not byte-level text; added tokens
// with single_word, lstrip, rstrip or normalized set (Qwen2.5's have none).
// Ignored: the post_processor (encode with add_special_tokens=False adds
// nothing), and truncation and padding (a file that sets them makes Hugging
// Face cut or pad; here the ids are always those of the whole text).
//
// Text that is not valid UTF-8 (which Hugging Face cannot take) is still
// encoded: each invalid byte splits as a symbol character would and becomes
// its own byte token, so Decode returns the input bytes unchanged.
//
// A Tokenizer is immutable once built except for a bounded cache of the ids
// of recent pieces (per Tokenizer, sharded, mutex-guarded); it is safe for
// concurrent use.
package tokenizer
