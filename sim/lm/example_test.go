package lm

import (
	"fmt"

	"github.com/hindsearch/hindsearch/clients/policy/format"
)

// The simulator's tokenizer is Qwen2.5's: a search turn ends in the token
// ">\n\n", which runs past the stop string </search>.
func ExampleTokenizer_Encode() {
	tk, _ := NewTokenizer()
	for _, id := range tk.Encode("<search> Lavatera </search>\n\n") {
		fmt.Printf("%d %q\n", id, tk.Piece(id))
	}
	// Output:
	// 27 "<"
	// 1836 "search"
	// 29 ">"
	// 42850 " Lav"
	// 962 "ater"
	// 64 "a"
	// 690 " </"
	// 1836 "search"
	// 1339 ">\n\n"
}

// ChatTemplate renders Qwen2.5's chat template; without a system message
// it inserts Qwen2.5's default system line.
func ExampleChatTemplate() {
	msgs := []ChatMessage{{Role: "user", Content: format.UserPrompt("Who wrote Hamlet", "")[len(format.Instruction):]}}
	fmt.Print(ChatTemplate(msgs, true))
	// Output:
	// <|im_start|>system
	// You are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>
	// <|im_start|>user
	// Question: Who wrote Hamlet?
	// <|im_end|>
	// <|im_start|>assistant
}
