package switchd

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
type Target struct {
	Passive bool   // listen (punix, ptcp) rather than connect
	Network string // "unix" or "tcp"
	Address string // socket path, or host:port
}

func (t Target) String() string {
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
		return Target{}, fmt.Errorf("target %q: want punix:PATH, ptcp:PORT[:IP], unix:PATH or tcp:IP:PORT", s)
	}
	switch kind {
	case "punix", "unix":
		if rest == "" {
			return Target{}, fmt.Errorf("target %q: empty socket path", s)
		}
		return Target{Passive: kind == "punix", Network: "unix", Address: rest}, nil
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
	case "tcp":
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
		return Target{Network: "tcp", Address: net.JoinHostPort(host, port)}, nil
	}
	return Target{}, fmt.Errorf("target %q: unknown kind %q (punix, ptcp, unix, tcp)", s, kind)
}
