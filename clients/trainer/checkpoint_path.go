package trainer

import (
	"fmt"
	"regexp"
	"strings"
)

// reSamplerName is a checkpoint name as SkyRL accepts it (its ID_PATTERN),
// which every name the program saves matches; a model id is
// ValidModelID's.
var reSamplerName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// SplitCheckpointPath splits a trainer's checkpoint path (what
// save_weights and save_weights_for_sampler answer) into its model id,
// kind ("weights" for a training state, "sampler_weights") and name:
// tinker://<id>/<name> (SkyRL's sampler answer),
// tinker://<id>/sampler_weights/<name> or tinker://<id>/weights/<name>.
// It checks the shape only; CheckCheckpointRef checks the id and name.
func SplitCheckpointPath(tinkerPath string) (id, kind, name string, err error) {
	rest, ok := strings.CutPrefix(tinkerPath, "tinker://")
	if !ok || rest == "" {
		return "", "", "", fmt.Errorf("sampler path %q is not a tinker:// path", tinkerPath)
	}
	seg := strings.Split(rest, "/")
	switch {
	case len(seg) == 2:
		return seg[0], "sampler_weights", seg[1], nil
	case len(seg) == 3 && (seg[1] == "sampler_weights" || seg[1] == "weights"):
		return seg[0], seg[1], seg[2], nil
	}
	return "", "", "", fmt.Errorf("sampler path %q: want tinker://<model_id>/<name> or tinker://<model_id>/sampler_weights/<name>", tinkerPath)
}

// CheckCheckpointRef refuses a model id or checkpoint name of tinkerPath that
// could reach outside the checkpoints directory or that SkyRL refuses.
func CheckCheckpointRef(tinkerPath, id, name string) error {
	if !ValidModelID(id) {
		return fmt.Errorf("sampler path %q: model id %q must be letters, digits, '_', '-', '.' or ':' (and not . or ..)", tinkerPath, id)
	}
	if !reSamplerName.MatchString(name) {
		return fmt.Errorf("sampler path %q: name %q must match ^[A-Za-z0-9_-]+$", tinkerPath, name)
	}
	return nil
}
