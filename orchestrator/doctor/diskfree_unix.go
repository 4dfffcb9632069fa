//go:build unix

package doctor

import (
	"os"
	"path/filepath"
	"syscall"
)

// FreeBytes is the space free to this user on the filesystem of dir (or
// of its nearest existing parent); false when it cannot be read.
func FreeBytes(dir string) (int64, bool) {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			var st syscall.Statfs_t
			if syscall.Statfs(d, &st) != nil {
				return 0, false
			}
			return int64(st.Bavail) * int64(st.Bsize), true
		}
		if filepath.Dir(d) == d {
			return 0, false
		}
	}
}
