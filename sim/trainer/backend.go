package trainer

// Backend is which of SkyRL's training backends the simulated
// trainer behaves like: its loss normalisation, gradient clipping and how
// many models one server holds.
type Backend string

const (
	// BackendJAX is SkyRL's JAX backend (skyrl/backends/jax.py): each
	// datum's loss is its mean over its weighted tokens; LoRA models share
	// a server; rank 0 is refused.
	BackendJAX Backend = "jax"
	// BackendFSDP is SkyRL's FSDP backend (skyrl_train_backend.py): the
	// loss is a token sum over the whole step, the gradient norm is
	// clipped at 1.0, and the server holds one policy model at a time.
	BackendFSDP Backend = "fsdp"
)

// Backends lists the accepted Backend values.
var Backends = []Backend{BackendJAX, BackendFSDP}
