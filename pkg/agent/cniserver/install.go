package cniserver

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/nagare-net/nagare/internal/atomicfile"
)

// ConflistName is the file Install writes into the runtime's config
// directory. "10-" puts it ahead of most others: runtimes use the first.
const ConflistName = "10-nagare.conflist"

// ConflistVersion is the cniVersion of the installed configuration. The
// plugin speaks 1.1.0 (GC, STATUS) to runtimes that send it, but the
// conflist says 1.0.0: containerd 1.6 and 1.7 (libcni 1.1) refuse a 1.1.0
// result ("unsupported CNI result version").
const ConflistVersion = "1.0.0"

// DefaultConflist is the network configuration that sends a runtime's
// calls to the agent at socket.
func DefaultConflist(socket string) []byte {
	return []byte(fmt.Sprintf(`{
  "cniVersion": %q,
  "name": "nagare",
  "plugins": [
    {"type": "nagare-cni", "socket": %q}
  ]
}
`, ConflistVersion, socket))
}

// Install copies the plugin binary into binDir and writes the conflist
// into confDir, each atomically (a temporary file, synced, renamed): a
// runtime never runs a half-written plugin or reads half a config.
func Install(src, binDir, confDir string, conflist []byte) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	defer in.Close()
	bin := filepath.Join(binDir, "nagare-cni")
	if err := atomicfile.Write(bin, 0o755, func(w io.Writer) error {
		if _, err := io.Copy(w, in); err != nil {
			return fmt.Errorf("install %s: %w", bin, err)
		}
		return nil
	}); err != nil {
		return err
	}
	conf := filepath.Join(confDir, ConflistName)
	return atomicfile.Write(conf, 0o644, func(w io.Writer) error {
		if _, err := w.Write(conflist); err != nil {
			return fmt.Errorf("install %s: %w", conf, err)
		}
		return nil
	})
}
