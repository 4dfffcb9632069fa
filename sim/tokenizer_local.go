package sim

// The names here let a process use the simulator's tokenizer as its local
// tokenizer (the orchestrator's policy.tokenizer for embedded policies):
// Tokenizer has TokenBytes and AppendEncode (Qwen2.5's, see tokenizer.go),
// and ChatTemplate is the template the simulated policy's /tokenize applies.

// ChatMessage is one message of the simulated chat template (ChatTemplate).
type ChatMessage = chatMessage
