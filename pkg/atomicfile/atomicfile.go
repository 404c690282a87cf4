// Package atomicfile writes a file so that a reader sees either the old
// content or the whole new one, never a part: a temporary file in the same
// directory, filled, given its mode, synced, then renamed over the path,
// and the directory synced so that the rename survives a crash.
package atomicfile

import (
	"io"
	"os"
	"path/filepath"
)

// Write creates path's directory if needed (0755) and replaces path with
// what fill writes, with mode. On any error path is left as it was.
func Write(path string, mode os.FileMode, fill func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := fill(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// syncDir makes the directory's entries durable: a file's own fsync does
// not cover its name, so after a crash the rename may be lost (the old
// file back, or none at all). A variable for the tests.
var syncDir = func(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
