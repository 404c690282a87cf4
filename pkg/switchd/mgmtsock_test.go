package switchd

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestMgmtSocketModeFromCreation: the management socket is created with
// its final mode (0600), never chmod-ed after bind: between a bind under
// a loose umask and the chmod anyone could connect, and keep the
// connection. inotify sees a chmod as IN_ATTRIB on the socket (before:
// one came right after the IN_CREATE). No root needed.
func TestMgmtSocketModeFromCreation(t *testing.T) {
	dir := t.TempDir()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Skipf("inotify: %v", err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_ATTRIB); err != nil {
		t.Fatal(err)
	}
	old := unix.Umask(0) // the loosest: a bind alone would make it 0777
	defer unix.Umask(old)
	s := &Switch{}
	path := filepath.Join(dir, "br-int.mgmt")
	l, err := s.listen(Target{Network: "unix", Address: path})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v, %v; want mode 0600", fi.Mode(), err)
	}
	buf := make([]byte, 4096)
	n, err := unix.Read(fd, buf)
	if err != nil {
		t.Fatalf("no inotify event for the socket: %v", err)
	}
	var created bool
	for off := 0; off+unix.SizeofInotifyEvent <= n; {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		if ev.Mask&unix.IN_CREATE != 0 {
			created = true
		}
		if ev.Mask&unix.IN_ATTRIB != 0 {
			t.Errorf("the socket's attributes changed after its creation (a chmod after bind)")
		}
		off += unix.SizeofInotifyEvent + int(ev.Len)
	}
	if !created {
		t.Error("no IN_CREATE for the socket")
	}
}
