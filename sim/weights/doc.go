// Package weights is the simulator's weight files: the simulated policy's
// parameter vector as safetensors, packed as a PEFT-shaped adapter or a
// full-weight export in one of SkyRL's archive layouts. The simulated
// trainer (sim/trainer) writes them and the simulated policy servers (sim)
// read them, as the orchestrator's sync moves them between the two.
package weights
