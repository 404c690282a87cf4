package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReplacesWithMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "key.pem")
	for _, content := range []string{"old", "new"} {
		if err := Write(path, 0o600, func(w io.Writer) error { _, err := io.WriteString(w, content); return err }); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "new" {
		t.Fatalf("content %q, %v; want new", b, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestFailedFillLeavesTheOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(path, 0o644, func(w io.Writer) error { io.WriteString(w, "half"); return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Errorf("content %q after a failed write, want old", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d entries in the directory, want only the file (temporary left behind?)", len(ents))
	}
}

// TestWriteSyncsTheDirectory: once Write returns, the directory holding
// the new name has been synced after the rename (before: only the file
// was, and a crash could lose the rename).
func TestWriteSyncsTheDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "key.pem")
	var synced []string
	real := syncDir
	syncDir = func(dir string) error {
		if b, err := os.ReadFile(path); err != nil || string(b) != "new" {
			t.Errorf("directory synced before the rename: %q, %v", b, err)
		}
		synced = append(synced, dir)
		return real(dir)
	}
	defer func() { syncDir = real }()
	if err := Write(path, 0o600, func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }); err != nil {
		t.Fatal(err)
	}
	if len(synced) != 1 || synced[0] != filepath.Dir(path) {
		t.Errorf("directories synced: %v, want [%s]", synced, filepath.Dir(path))
	}
}
