package controlnet

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"syscall"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// inNetns runs fn on a thread in the namespace at path ("" = here).
// Sockets keep the namespace they were made in.
func inNetns(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	return ns.WithNetNSPath(path, func(ns.NetNS) error { return fn() })
}

// Listen makes the switch's control listener: TCP on addr (an explicit
// address, never a wildcard) inside the namespace at netnsPath, bound to
// the device that holds the address, so nothing arriving on another
// device of that namespace (a pod's packet routed by the DPU's stack)
// reaches it; then TLS with cfg.
func Listen(netnsPath, addr string, cfg *tls.Config) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.IsUnspecified() {
		return nil, fmt.Errorf("controlnet: listen address %q: want the control address itself, not a wildcard", host)
	}
	var l net.Listener
	err = inNetns(netnsPath, func() error {
		dev, err := deviceOf(ip)
		if err != nil {
			return err
		}
		lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) { serr = unix.BindToDevice(int(fd), dev) }); err != nil {
				return err
			}
			return serr
		}}
		l, err = lc.Listen(context.Background(), "tcp", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("controlnet: listen %s: %w", addr, err)
	}
	return tls.NewListener(l, cfg), nil
}

// deviceOf is the name of the device holding ip in the calling thread's
// namespace.
func deviceOf(ip net.IP) (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, i := range ifs {
		addrs, err := i.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return i.Name, nil
			}
		}
	}
	return "", fmt.Errorf("no device holds %s here", ip)
}

// Endpoint is where the agent reaches its switch: a Unix socket (host
// mode) or the DPU's control address over TLS (DPU mode), dialed from the
// host's namespace.
type Endpoint struct {
	Network string // "unix" or "tcp"
	Address string // socket path, or ip:port
	Netns   string // namespace to dial from ("" = the caller's)
	TLS     *tls.Config
}

func (e Endpoint) String() string {
	if e.TLS != nil {
		return "ssl:" + e.Address
	}
	return e.Network + ":" + e.Address
}

// Dial connects (and, over TCP, completes the TLS handshake, so a refused
// certificate is an error here, not at the first read).
func (e Endpoint) Dial(ctx context.Context) (net.Conn, error) {
	var c net.Conn
	err := inNetns(e.Netns, func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, e.Network, e.Address)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("switch at %s: %w", e, err)
	}
	if e.TLS == nil {
		return c, nil
	}
	tc := tls.Client(c, e.TLS)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("switch at %s: TLS: %w", e, err)
	}
	return tc, nil
}
