//go:build !unix

package doctor

// FreeBytes cannot read free space on this platform.
func FreeBytes(string) (int64, bool) { return 0, false }
