package sim

import (
	"fmt"

	"github.com/hindsearch/hindsearch/orchestrator/format"
)

// Encode cuts text into vocabulary pieces and falls back to bytes for
// anything else, so decoding always gives the text back.
func ExampleTokenizer_Encode() {
	tk := NewTokenizer("Lavatera is a genus of flowering plants.")
	for _, s := range []string{"Lavatera is a genus", " Oplismenus?", "日本 \xff"} {
		ids := tk.Encode(s)
		back, ok := tk.Decode(ids)
		fmt.Println(len(ids), back == s && ok)
	}
	// Output:
	// 4 true
	// 12 true
	// 8 true
}

// ChatTemplate renders the Qwen2.5 chat format; without a system message
// it inserts the simulator's own system line.
func ExampleChatTemplate() {
	msgs := []chatMessage{{Role: "user", Content: format.UserPrompt("Who wrote Hamlet", "")[len(format.Instruction):]}}
	fmt.Print(ChatTemplate(msgs, true))
	// Output:
	// <|im_start|>system
	// You are a simulated search agent (hindsearch simulator), not a language model.<|im_end|>
	// <|im_start|>user
	// Question: Who wrote Hamlet?
	// <|im_end|>
	// <|im_start|>assistant
}

// A safetensors file written by the simulated trainer holds its parameters
// at float32 precision.
func ExampleEncodeSafetensors() {
	p := InitialParams()
	p[PAnswerTypeMatch] = 0.1
	b, _ := EncodeSafetensors(p)
	q, err := DecodeSafetensors(b)
	fmt.Println(err, q[PSearchBias], q[PAnswerTypeMatch] == float64(float32(0.1)))
	// Output:
	// <nil> -1 true
}
