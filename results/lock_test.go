package results

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestLockRefusesASecondHolder(t *testing.T) {
	d, err := Create(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l, err := d.Lock()
	if err != nil {
		t.Fatal(err)
	}
	// flock locks belong to open files: a second open, as a second process
	// would make, is refused.
	_, err = d.Lock()
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second lock: %v", err)
	}
	l.Unlock()
	l2, err := d.Lock()
	if err != nil {
		t.Fatalf("after unlock: %v", err)
	}
	l2.Unlock()
}
