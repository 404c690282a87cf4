// Package unixsock makes a Unix socket that is never, even for an
// instant, more open than its final mode: the socket file is created by
// bind(2) with the process's umask, so the umask is set for the bind, not
// the mode chmod-ed afterwards (between the two, anyone the umask let in
// could connect, and a connection made then stays).
package unixsock

import (
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// umaskMu serializes the umask changes of this process's binds. The
// umask is the process's: a file another goroutine creates during a bind
// also gets the stricter mode (never a looser one).
var umaskMu sync.Mutex

// Listen listens on a Unix socket at path with mode (0600: owner only),
// making path's directory (dirMode) when missing. A stale socket at path
// is the caller's to remove.
func Listen(path string, mode, dirMode os.FileMode) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), dirMode); err != nil {
		return nil, err
	}
	umaskMu.Lock()
	old := syscall.Umask(int(^mode & 0o777))
	l, err := net.Listen("unix", path)
	syscall.Umask(old)
	umaskMu.Unlock()
	return l, err
}
