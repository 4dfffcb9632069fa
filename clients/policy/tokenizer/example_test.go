package tokenizer_test

import (
	"fmt"

	"github.com/hindsearch/hindsearch/clients/policy/tokenizer"
)

// The ids of a turn that stopped at </search>, and the exact bytes of each:
// a token can run past the stop string, and hold part of a character.
func ExampleTokenizer_Encode() {
	tok, err := tokenizer.Qwen25()
	if err != nil {
		panic(err)
	}
	ids := tok.Encode("<search> 北京 </search>\n\n<|im_end|>")
	for _, id := range ids {
		b, _ := tok.TokenBytes(id)
		fmt.Printf("%d\t%q\tspecial=%v\n", id, b, tok.IsSpecial(id))
	}
	// Output:
	// 27	"<"	special=false
	// 1836	"search"	special=false
	// 29	">"	special=false
	// 94305	" \xe5\x8c"	special=false
	// 245	"\x97"	special=false
	// 46553	"京"	special=false
	// 690	" </"	special=false
	// 1836	"search"	special=false
	// 1339	">\n\n"	special=false
	// 151645	"<|im_end|>"	special=true
}
