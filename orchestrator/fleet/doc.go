// Package fleet is the policy fleet a run samples from: its replicas,
// balanced by least outstanding requests and drained while down
// (Replicas), the book of which weights each replica serves, and how a
// step's new weights reach them (Sync, one per sync.kind: LoRA adapters
// hot-loaded, or SGLang's disk reload of full weights), from the trainer's
// sampler archives (ArchivePath, UnpackAdapter, UnpackModel).
package fleet
