// Package roles is what a run holds of its servers, whoever started them:
// one client per role (Deps: the policy replicas, the judge, the
// retriever, the trainer), the policy model's tokenizer in this process
// (Tokenizer), and the wire settings a recipe gives their calls (the
// sampling fields every sampling or scoring request sends, and the seeds).
// The training loop and doctor take a Deps; orchestrator/setup builds one.
package roles
