package roles_test

import (
	"fmt"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
)

// Qwen2.5's chat template puts its default system message before a first
// message that is not a system message, and ends with the generation
// prompt.
func ExampleQwen25Chat() {
	fmt.Printf("%q\n", roles.Qwen25Chat([]policy.Message{{Role: "user", Content: "Who wrote Hamlet?"}}, true))
	// Output:
	// "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nWho wrote Hamlet?<|im_end|>\n<|im_start|>assistant\n"
}
