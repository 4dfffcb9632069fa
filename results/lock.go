package results

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// LockFile is the run directory's lock, held by the orchestrator writing it.
const LockFile = ".lock"

// Lock is a held run-directory lock.
type Lock struct{ f *os.File }

// ErrLocked reports a run directory held by another process.
var ErrLocked = errors.New("run directory in use")

// Lock takes the run directory's exclusive lock (an flock on .lock, which
// the kernel releases if the process dies, kill -9 included) and writes this
// process's id into it. A directory already held gives an error wrapping
// ErrLocked that names the holder's pid.
func (d *RunDir) Lock() (*Lock, error) {
	path := filepath.Join(d.Path, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", d.Path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		holder := strings.TrimSpace(string(b))
		if _, perr := strconv.Atoi(holder); perr != nil {
			holder = "unknown"
		}
		return nil, fmt.Errorf("%s: %w by another orchestrator (pid %s): wait for it to finish, or use another output.dir", d.Path, ErrLocked, holder)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// Unlock releases the lock.
func (l *Lock) Unlock() {
	if l == nil || l.f == nil {
		return
	}
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	l.f.Close()
	l.f = nil
}
