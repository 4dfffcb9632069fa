// Command orchestrate is the hindsearch control plane: it trains LLM search
// agents with GRPO plus hindsight critique against vLLM, a judge, a
// retriever and a Tinker-API trainer, or against the embedded simulator.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCmd(os.Stdout, os.Stderr, os.Environ())
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "orchestrate:", err)
		os.Exit(1)
	}
}
