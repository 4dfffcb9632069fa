//go:build unix

package transport

import "syscall"

// peekOpen looks at c's socket without blocking or consuming anything: it
// is open when nothing is there yet; a close by the server (EOF), a reset
// or unasked bytes all mean it must not be reused.
func peekOpen(c syscall.Conn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var buf [1]byte
	open := false
	err = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		_ = n
		open = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true
	})
	return err == nil && open
}
