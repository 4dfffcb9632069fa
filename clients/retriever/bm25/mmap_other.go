//go:build !unix

package bm25

import (
	"os"
	"sync"
)

// mapFile reads the file at path into memory: no memory mapping on this
// platform (the index then lives in the heap).
func mapFile(path string) (data []byte, unmap func() error, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	return b, func() error { return nil }, nil
}

var buildLocks sync.Map

// lockFile serialises builders of one entry within this process only: no
// file locks on this platform, so two processes building the same corpus
// at once would share one build directory. Run one.
func lockFile(path string) (unlock func(), err error) {
	m, _ := buildLocks.LoadOrStore(path, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock, nil
}
