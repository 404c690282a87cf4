package cniserver

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/nagare-net/nagare/pkg/atomicfile"
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
// calls to the agent at socket. With portmap, the reference CNI plugin
// follows nagare-cni for pods' hostPorts (the runtime hands it the
// portMappings capability): it DNATs hostIP:hostPort to the pod in the
// node's own netfilter tables, and the node routes that into the switch
// through the gateway like any node-to-pod packet; for a hostIP of
// 127.0.0.1 it sets route_localnet on the gateway and masquerades.
func DefaultConflist(socket string, portmap bool) []byte {
	chained := ""
	if portmap {
		chained = `,
    {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}`
	}
	return []byte(fmt.Sprintf(`{
  "cniVersion": %q,
  "name": "nagare",
  "plugins": [
    {"type": "nagare-cni", "socket": %q}%s
  ]
}
`, ConflistVersion, socket, chained))
}

// Install copies the plugin binaries (nagare-cni, and portmap if the
// conflist chains it) into binDir under their own names and writes the
// conflist into confDir, each atomically (a temporary file, synced,
// renamed): a runtime never runs a half-written plugin or reads half a
// config.
func Install(plugins []string, binDir, confDir string, conflist []byte) error {
	for _, src := range plugins {
		if err := installBinary(src, filepath.Join(binDir, filepath.Base(src))); err != nil {
			return err
		}
	}
	conf := filepath.Join(confDir, ConflistName)
	return atomicfile.Write(conf, 0o644, func(w io.Writer) error {
		if _, err := w.Write(conflist); err != nil {
			return fmt.Errorf("install %s: %w", conf, err)
		}
		return nil
	})
}

func installBinary(src, bin string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	defer in.Close()
	return atomicfile.Write(bin, 0o755, func(w io.Writer) error {
		if _, err := io.Copy(w, in); err != nil {
			return fmt.Errorf("install %s: %w", bin, err)
		}
		return nil
	})
}
