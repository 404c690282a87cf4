package lab

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
)

// A DataPlane connects the pods of a Topology: a Linux bridge, host routes,
// an Open vSwitch, nagare itself. Each data plane is one file
// (dataplane_*.go) that calls RegisterDataPlane from init.
//
// The runner creates all node and pod namespaces (with loopback up and IPv6
// off) and the underlay between nodes before Setup; the data plane adds the
// pods' eth0 interfaces and whatever joins them. A fresh instance (from the
// registered factory) is used for each run, so a data plane may keep state
// such as daemon PIDs in its fields.
type DataPlane interface {
	// Name is the identifier used in scenarios and reports, e.g. "linux-bridge".
	Name() string
	// Description is a one-line picture of the packet path for reports.
	Description() string
	// Scope says which traffic the data plane carries: ScopeIntraNode,
	// ScopeInterNode or both. Measurements outside it are reported as n/a.
	Scope() Scope
	// Available returns nil if the data plane can run on this host, or an
	// error (wrapping ErrNotAvailable) saying why not; the runner then
	// reports the data plane as skipped with that reason instead of failing.
	Available() error
	// Setup builds the data plane in t's namespaces. Every kernel object or
	// process it creates outside t's namespaces, and every process it starts,
	// must be registered with t.Cleanup.Add before or right after creating
	// it, so that an interrupted Setup is undone too.
	Setup(ctx context.Context, t *Topology) error
	// Teardown is called after the measurements, before t.Cleanup runs;
	// most data planes leave everything to t.Cleanup and return nil.
	Teardown(ctx context.Context, t *Topology) error
	// Processes returns the PIDs whose CPU time is accounted as "switch"
	// CPU and that the same-core placement pins; nil for in-kernel planes.
	Processes() []int
}

// DPUPlane is a data plane whose switch runs in a DPU domain (docs/dpu.md):
// DPUProcesses are those switch processes, accounted as DPU CPU, apart
// from the host's (Processes, none of which is a switch then).
type DPUPlane interface {
	DPUProcesses() []int
}

// dpuProcesses are dp's DPU-domain processes, if it has any.
func dpuProcesses(dp DataPlane) []int {
	if d, ok := dp.(DPUPlane); ok {
		return d.DPUProcesses()
	}
	return nil
}

// UplinkPlane is a data plane that can make the uplink ports of a
// scenario (PodSpec.Uplink): switch ports towards a tester namespace,
// attached like pods. UplinkSupport returns nil, or why not (an error
// wrapping ErrNotAvailable). Planes that do not implement it are skipped
// in scenarios with uplinks.
type UplinkPlane interface {
	UplinkSupport() error
}

// uplinkSupport says whether dp can run a scenario with uplink ports.
func uplinkSupport(dp DataPlane) error {
	u, ok := dp.(UplinkPlane)
	if !ok {
		return notAvailable("%s does not make uplink ports to a tester namespace (the scenario's pods with uplink:)", dp.Name())
	}
	return u.UplinkSupport()
}

// Scope is a set of traffic classes a data plane carries.
type Scope uint8

// Traffic classes.
const (
	// ScopeLocal is loopback inside one pod: always available.
	ScopeLocal Scope = 1 << iota
	// ScopeIntraNode is pod to pod on one node.
	ScopeIntraNode
	// ScopeInterNode is pod to pod across the underlay.
	ScopeInterNode
)

// Has reports whether every class in o is in s.
func (s Scope) Has(o Scope) bool { return s&o == o }

func (s Scope) String() string {
	switch s {
	case ScopeLocal:
		return "local"
	case ScopeIntraNode:
		return "intra-node"
	case ScopeInterNode:
		return "inter-node"
	case ScopeIntraNode | ScopeInterNode:
		return "intra+inter-node"
	}
	return fmt.Sprintf("scope(%d)", uint8(s))
}

// ErrNotAvailable is wrapped by DataPlane.Available errors: the data plane
// cannot run on this host (missing tool, kernel feature, ...).
var ErrNotAvailable = errors.New("not available")

var (
	registryMu sync.Mutex
	registry   = map[string]func() DataPlane{}
)

// reportOrder puts the peers first, cheapest path first; planes not listed
// here (nagare's own, new ones) follow in name order.
var reportOrder = []string{"veth", "tc-redirect", "linux-bridge", "routed", "ovs-netdev", "linux-bridge+vxlan", "ovs-vxlan"}

// RegisterDataPlane makes a data plane known under factory().Name(). It is
// meant to be called from init in the data plane's own file and panics on a
// duplicate name.
func RegisterDataPlane(factory func() DataPlane) {
	registryMu.Lock()
	defer registryMu.Unlock()
	name := factory().Name()
	if _, dup := registry[name]; dup {
		panic("lab: data plane registered twice: " + name)
	}
	registry[name] = factory
}

func lookupDataPlane(name string) (func() DataPlane, bool) {
	registryMu.Lock()
	defer registryMu.Unlock()
	f, ok := registry[name]
	return f, ok
}

// DataPlaneNames lists the registered data planes in report order.
func DataPlaneNames() []string {
	registryMu.Lock()
	defer registryMu.Unlock()
	rank := map[string]int{}
	for i, n := range reportOrder {
		rank[n] = i + 1
	}
	var names []string
	for n := range registry {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		ri, rj := rank[names[i]], rank[names[j]]
		if ri == 0 {
			ri = len(reportOrder) + 1
		}
		if rj == 0 {
			rj = len(reportOrder) + 1
		}
		if ri != rj {
			return ri < rj
		}
		return names[i] < names[j]
	})
	return names
}

// NewDataPlane returns a fresh instance of a registered data plane.
func NewDataPlane(name string) (DataPlane, error) {
	f, ok := lookupDataPlane(name)
	if !ok {
		return nil, fmt.Errorf("unknown data plane %q", name)
	}
	return f(), nil
}

// notAvailable builds an Available error.
func notAvailable(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrNotAvailable, fmt.Sprintf(format, a...))
}
