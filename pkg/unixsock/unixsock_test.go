package unixsock

import (
	"os"
	"path/filepath"
	"testing"
)

func TestListenMode(t *testing.T) {
	for _, mode := range []os.FileMode{0o600, 0o660} {
		path := filepath.Join(t.TempDir(), "run", "s.sock")
		l, err := Listen(path, mode, 0o700)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		l.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != mode {
			t.Errorf("socket mode %o, want %o", got, mode)
		}
	}
}
