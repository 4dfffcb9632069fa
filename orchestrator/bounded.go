package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hindsearch/hindsearch/clients/trainer"
)

// boundedTrainer bounds every training call, its future's polling
// included, so that a future that never resolves fails the step.
type boundedTrainer struct {
	trainer.Trainer
	timeout time.Duration
}

func (b boundedTrainer) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if b.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, b.timeout)
}

func (b boundedTrainer) wrap(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w (trainer.call_timeout_seconds is %v; continue with --resume)", err, b.timeout.Seconds())
	}
	return err
}

func (b boundedTrainer) ForwardBackward(ctx context.Context, modelID string, data []trainer.Datum, lossFn string, lossCfg map[string]float64) (*trainer.ForwardBackwardResult, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	res, err := b.Trainer.ForwardBackward(ctx, modelID, data, lossFn, lossCfg)
	return res, b.wrap(err)
}

func (b boundedTrainer) OptimStep(ctx context.Context, modelID string, adam trainer.AdamParams) (map[string]float64, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	m, err := b.Trainer.OptimStep(ctx, modelID, adam)
	return m, b.wrap(err)
}

func (b boundedTrainer) SaveWeightsForSampler(ctx context.Context, modelID, name string) (string, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	p, err := b.Trainer.SaveWeightsForSampler(ctx, modelID, name)
	return p, b.wrap(err)
}

func (b boundedTrainer) SaveForSampling(ctx context.Context, s *trainer.Session, modelID string, note func(string) error) (trainer.SamplerSession, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	ss, err := b.Trainer.SaveForSampling(ctx, s, modelID, note)
	return ss, b.wrap(err)
}

func (b boundedTrainer) SaveState(ctx context.Context, modelID, name string) (string, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	p, err := b.Trainer.SaveState(ctx, modelID, name)
	return p, b.wrap(err)
}

func (b boundedTrainer) LoadState(ctx context.Context, modelID, path string) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.wrap(b.Trainer.LoadState(ctx, modelID, path))
}

func (b boundedTrainer) UnloadModel(ctx context.Context, modelID string) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.wrap(b.Trainer.UnloadModel(ctx, modelID))
}

func (b boundedTrainer) DeleteCheckpoint(ctx context.Context, modelID, id string) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.wrap(b.Trainer.DeleteCheckpoint(ctx, modelID, id))
}
