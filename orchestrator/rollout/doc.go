// Package rollout rolls out Search-R1 trajectories: one question answered
// by the policy in turns of think, search (the retriever's passages come
// back as an <information> block) and answer, up to rollout.max_turns
// searched rounds and, with rollout.final_answer_round, one more round
// whose search is not run (Search-R1's final round), with token ids in and out,
// the sampling logprobs, the search span of each turn located by the ids'
// bytes under the local tokenizer, and the searches of concurrent
// trajectories coalesced into batched /retrieve calls. The Trajectory is
// what the training loop scores, critiques and trains on.
package rollout
