package agent

import (
	"context"
	"net"
	"net/netip"

	"github.com/nagare-net/nagare/pkg/agent/ipam"
	"github.com/nagare-net/nagare/pkg/agent/nodenet"
	"github.com/nagare-net/nagare/pkg/agent/podnet"
	"github.com/nagare-net/nagare/pkg/ctlproto"
)

// What the agent does to the node, as the small interfaces its pod, GC
// and node logic needs: the real ones are netlink (podnet, nodenet), the
// IPAM database and the switch's control socket; the tests in this
// package give fakes, so that ADD, DEL, GC, restarts and node changes are
// tested without root (as Cilium's agent is).

// podNetwork is the node side of a pod's attachment (podnet.Node).
type podNetwork interface {
	Setup(podnet.Pod) (podnet.Attached, error)
	Teardown(host string) error
	HostExists(host string) (bool, error)
	Check(podnet.Pod) error
}

// nodeNetwork is the node's own devices and routes (*nodenet.Net).
type nodeNetwork interface {
	EnsureGateway() (nodenet.Gateway, error)
	EnsureTunnel() error
	EnsureRemote(nodenet.Remote, net.HardwareAddr) error
	DelRemote(nodenet.Remote) error
	EnsureServiceRoute(netip.Prefix, net.HardwareAddr) error
	DelServiceRoute(netip.Prefix) error
	EnsureProxyLink(name string) (nodenet.ProxyLink, error)
	Close()
}

// podStore is the IPAM database with the agent's records (*ipam.Store).
type podStore interface {
	Allocate(containerID, ifName, pod string) (ipam.Allocation, bool, error)
	SetAttachment(containerID, ifName string, rec []byte) error
	Release(containerID, ifName string) (bool, error)
	List() ([]ipam.Allocation, error)
	Stats() (used, total int)
}

// switchControl runs one request of the switch's control protocol.
type switchControl func(context.Context, ctlproto.Request) (*ctlproto.Response, error)

var (
	_ podNetwork  = podnet.Node{}
	_ nodeNetwork = (*nodenet.Net)(nil)
	_ podStore    = (*ipam.Store)(nil)
)
