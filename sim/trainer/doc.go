// Package trainer is the simulated trainer: a server of the Tinker training
// API as SkyRL serves it (PROTOCOLS.md §5, Server), which trains the
// simulated policy's parameters (sim/lm) by real gradient steps and saves
// them as the simulator's weight files (sim/weights). sim.Start serves it
// beside the simulated policy and judge; it does not import sim.
package trainer
