// Package inns reaches into a network namespace by its path (a node's, a
// pod's, a DPU domain's; "" = the caller's own): a netlink handle or an
// nftables connection opened in it, so no goroutine changes its own
// namespace, and its sysctls, which do need a thread inside it (/proc/sys
// shows the namespace of the thread that reads it).
package inns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// SysctlRoot is where the kernel's sysctls are read and written. In a
// container that is not privileged /proc/sys is mounted read-only; the
// DaemonSet then mounts the host's /proc/sys/net at /host/proc/sys/net
// and the agent is given --proc-sys /host/proc/sys. Which namespace a
// net.* sysctl belongs to is still the reading thread's, whatever the
// mount.
var SysctlRoot = "/proc/sys"

// Netlink is a netlink handle in the namespace at path.
func Netlink(path string) (*netlink.Handle, error) {
	if path == "" {
		return netlink.NewHandle()
	}
	h, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("namespace %s: %w", path, err)
	}
	defer h.Close()
	return netlink.NewHandleAt(h)
}

// Nftables is an nftables connection in the namespace at path, and what
// releases it.
func Nftables(path string, opts ...nftables.ConnOption) (*nftables.Conn, func(), error) {
	if path == "" {
		c, err := nftables.New(opts...)
		return c, func() {}, err
	}
	h, err := netns.GetFromPath(path)
	if err != nil {
		return nil, nil, fmt.Errorf("namespace %s: %w", path, err)
	}
	c, err := nftables.New(append([]nftables.ConnOption{nftables.WithNetNSFd(int(h))}, opts...)...)
	if err != nil {
		h.Close()
		return nil, nil, err
	}
	return c, func() { h.Close() }, nil
}

// Sysctls sets each key (a path under SysctlRoot, "net/ipv4/ip_forward")
// to its value in the namespace at path. A key the kernel does not have
// (IPv6 off altogether) is skipped; a value already set is not written.
func Sysctls(path string, kv map[string]string) error {
	set := func() error {
		for k, v := range kv {
			p := filepath.Join(SysctlRoot, k)
			cur, err := os.ReadFile(p)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err == nil && string(cur) == v+"\n" {
				continue
			}
			if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
				return fmt.Errorf("sysctl %s=%s: %w", k, v, err)
			}
		}
		return nil
	}
	if path == "" {
		return set()
	}
	return ns.WithNetNSPath(path, func(ns.NetNS) error { return set() })
}

// NoIPv6 turns IPv6 off on device ifname of the namespace at path: a
// switch port or a pod interface, not a router's: no link-local address,
// no DAD, router or neighbour solicitations for the spoof guard to drop.
func NoIPv6(path, ifname string) error {
	return Sysctls(path, map[string]string{"net/ipv6/conf/" + ifname + "/disable_ipv6": "1"})
}
