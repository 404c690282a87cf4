package ctlproto

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Target is an OpenFlow connection endpoint in Open vSwitch syntax:
//
//	punix:PATH        listen on a Unix socket (mode 0600)
//	ptcp:PORT[:IP]    listen on TCP, loopback unless IP is given
//	unix:PATH         connect to a Unix socket
//	tcp:IP:PORT       connect to a controller
//	pssl:PORT:IP      listen on TCP with mutual TLS (the DPU's control
//	                  network, docs/dpu.md): the address is required and
//	                  never a wildcard; OpenFlow and the control protocol
//	ssl:IP:PORT       connect with mutual TLS (the agent, to a DPU's switch)
type Target struct {
	Passive bool   // listen (punix, ptcp, pssl) rather than connect
	Network string // "unix" or "tcp"
	Address string // socket path, or host:port
	TLS     bool   // pssl, ssl
}

func (t Target) String() string {
	if t.TLS {
		if t.Passive {
			host, port, _ := net.SplitHostPort(t.Address)
			return "pssl:" + port + ":" + host
		}
		return "ssl:" + t.Address
	}
	s := t.Network + ":" + t.Address
	if t.Passive {
		if t.Network == "tcp" {
			host, port, _ := net.SplitHostPort(t.Address)
			return "ptcp:" + port + ":" + host
		}
		s = "p" + s
	}
	return s
}

// DefaultOpenFlowPort is the IANA OpenFlow port.
const DefaultOpenFlowPort = 6653

// ParseTarget parses one connection target.
func ParseTarget(s string) (Target, error) {
	kind, rest, ok := strings.Cut(s, ":")
	if !ok && kind != "ptcp" {
		return Target{}, fmt.Errorf("target %q: want punix:PATH, ptcp:PORT[:IP], pssl:PORT:IP, unix:PATH, tcp:IP:PORT or ssl:IP:PORT", s)
	}
	switch kind {
	case "punix", "unix":
		if rest == "" {
			return Target{}, fmt.Errorf("target %q: empty socket path", s)
		}
		return Target{Passive: kind == "punix", Network: "unix", Address: rest}, nil
	case "pssl":
		port, ip, ok := strings.Cut(rest, ":")
		ip = strings.Trim(ip, "[]")
		if n, err := strconv.Atoi(port); !ok || err != nil || n <= 0 || n > 65535 {
			return Target{}, fmt.Errorf("target %q: want pssl:PORT:IP", s)
		}
		if a := net.ParseIP(ip); a == nil || a.IsUnspecified() {
			return Target{}, fmt.Errorf("target %q: pssl needs the control address itself, not %q", s, ip)
		}
		return Target{Passive: true, Network: "tcp", Address: net.JoinHostPort(ip, port), TLS: true}, nil
	case "ptcp":
		port, ip := strconv.Itoa(DefaultOpenFlowPort), "127.0.0.1"
		if rest != "" {
			p, h, hasIP := strings.Cut(rest, ":")
			port = p
			if hasIP {
				ip = strings.Trim(h, "[]")
			}
		}
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return Target{}, fmt.Errorf("target %q: bad port %q", s, port)
		}
		if net.ParseIP(ip) == nil {
			return Target{}, fmt.Errorf("target %q: bad address %q", s, ip)
		}
		return Target{Passive: true, Network: "tcp", Address: net.JoinHostPort(ip, port)}, nil
	case "tcp", "ssl":
		host, port, err := net.SplitHostPort(rest)
		if err != nil {
			host, port = rest, strconv.Itoa(DefaultOpenFlowPort)
		}
		if net.ParseIP(strings.Trim(host, "[]")) == nil {
			return Target{}, fmt.Errorf("target %q: bad address %q", s, host)
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			return Target{}, fmt.Errorf("target %q: bad port %q", s, port)
		}
		return Target{Network: "tcp", Address: net.JoinHostPort(host, port), TLS: kind == "ssl"}, nil
	}
	return Target{}, fmt.Errorf("target %q: unknown kind %q (punix, ptcp, pssl, unix, tcp, ssl)", s, kind)
}
