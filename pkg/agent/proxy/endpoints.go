package proxy

import (
	"fmt"
	"net/netip"
	"sort"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// portID is how an EndpointSlice port is matched to a Service port: by
// name and protocol (kube-proxy's ServicePortName).
type portID struct {
	name  string
	proto Protocol
}

// sliceEndpoints gathers a Service's endpoints per port from its
// EndpointSlices, as kube-proxy's endpoint slice cache does: the first
// address of each endpoint, the port number the slice gives under the
// port's name (so a named targetPort resolves per endpoint), and an
// endpoint in two slices counted once (preferring the copy that says it is
// on this node). Bad entries are skipped with a Problem; the rest stand.
// Slices are read in name order, so the result does not depend on the
// order updates came in.
func sliceEndpoints(key ServiceKey, slices map[string]*discoveryv1.EndpointSlice, nodeName string) (map[portID][]Endpoint, []Problem) {
	var problems []Problem
	names := make([]string, 0, len(slices))
	for n := range slices {
		names = append(names, n)
	}
	sort.Strings(names)
	type epKey struct {
		id   portID
		addr netip.AddrPort
	}
	index := map[epKey]int{}
	out := map[portID][]Endpoint{}
	for _, n := range names {
		es := slices[n]
		bad := func(reason, format string, args ...any) {
			problems = append(problems, Problem{Service: key, Object: "EndpointSlice", Name: es.Name, Reason: reason, Message: fmt.Sprintf(format, args...)})
		}
		switch es.AddressType {
		case discoveryv1.AddressTypeIPv4:
		case discoveryv1.AddressTypeIPv6:
			continue // the other family's (nagare's pod network is IPv4)
		default:
			bad(ReasonUnsupportedFamily, "addressType %q: only IPv4 endpoints are proxied; slice ignored", es.AddressType)
			continue
		}
		type slicePort struct {
			id   portID
			port uint16
		}
		var ports []slicePort
		for _, p := range es.Ports {
			proto := corev1.ProtocolTCP
			if p.Protocol != nil {
				proto = *p.Protocol
			}
			pr, ok := protocolOf(proto)
			name := ""
			if p.Name != nil {
				name = *p.Name
			}
			if !ok || p.Port == nil || *p.Port < 1 || *p.Port > 65535 {
				port := "none"
				if p.Port != nil {
					port = fmt.Sprint(*p.Port)
				}
				bad(ReasonInvalidEndpointPort, "port %q: protocol %q, port %s: not usable; port ignored", name, proto, port)
				continue
			}
			ports = append(ports, slicePort{portID{name, pr}, uint16(*p.Port)})
		}
		badAddrs := 0
		firstBad := ""
		for _, e := range es.Endpoints {
			if len(e.Addresses) == 0 {
				continue
			}
			a, err := netip.ParseAddr(e.Addresses[0])
			if err != nil || !a.Is4() {
				if badAddrs == 0 {
					firstBad = e.Addresses[0]
				}
				badAddrs++
				continue
			}
			ep := Endpoint{Addr: a,
				Ready:       e.Conditions.Ready == nil || *e.Conditions.Ready,
				Terminating: e.Conditions.Terminating != nil && *e.Conditions.Terminating}
			ep.Serving = ep.Ready
			if e.Conditions.Serving != nil {
				ep.Serving = *e.Conditions.Serving
			}
			if e.NodeName != nil {
				ep.NodeName = *e.NodeName
				ep.Local = ep.NodeName == nodeName && nodeName != ""
			}
			if r := e.TargetRef; r != nil && r.Kind == "Pod" {
				ep.Pod = r.Namespace + "/" + r.Name
			}
			for _, sp := range ports {
				ep.Port = sp.port
				k := epKey{sp.id, netip.AddrPortFrom(a, sp.port)}
				if i, dup := index[k]; dup {
					if ep.Local && !out[sp.id][i].Local {
						out[sp.id][i] = ep
					}
					continue
				}
				index[k] = len(out[sp.id])
				out[sp.id] = append(out[sp.id], ep)
			}
		}
		if badAddrs > 0 {
			// One problem per slice, not per address: a slice of a thousand
			// bad addresses is one event.
			bad(ReasonInvalidAddress, "%d endpoint address(es) not IPv4 addresses (first: %q); those endpoints ignored", badAddrs, firstBad)
		}
	}
	for id := range out {
		eps := out[id]
		sort.Slice(eps, func(i, j int) bool {
			if c := eps[i].Addr.Compare(eps[j].Addr); c != 0 {
				return c < 0
			}
			return eps[i].Port < eps[j].Port
		})
	}
	return out, problems
}

// categorize chooses the endpoints internal and external traffic use and
// the verdict when there are none, as kube-proxy's CategorizeEndpoints and
// its proxiers do (topology hints aside: nagare does not read them):
//
//   - Cluster policy: the ready endpoints; if none is ready anywhere, the
//     serving terminating ones (so connections drain instead of failing
//     while a rollout replaces the last pods).
//   - Local policy: this node's ready endpoints; if none, this node's
//     serving terminating ones.
//   - No usable endpoint anywhere: Reject. Usable ones only on other
//     nodes under a Local policy: Drop.
func categorize(s *Service, p *Port) {
	var cluster, local []Endpoint
	var hasAny bool
	for _, e := range p.Endpoints {
		if e.Ready {
			cluster = append(cluster, e)
		}
	}
	if len(cluster) == 0 {
		for _, e := range p.Endpoints {
			if e.Serving && e.Terminating {
				cluster = append(cluster, e)
			}
		}
	}
	hasAny = len(cluster) > 0
	if s.InternalLocal || s.ExternalLocal {
		var localReady, localTerminating bool
		for _, e := range p.Endpoints {
			localReady = localReady || (e.Local && e.Ready)
			localTerminating = localTerminating || (e.Local && e.Serving && e.Terminating)
		}
		for _, e := range p.Endpoints {
			if e.Local && ((localReady && e.Ready) || (!localReady && localTerminating && e.Serving && e.Terminating)) {
				local = append(local, e)
			}
		}
	}
	p.InternalEndpoints, p.ExternalEndpoints = cluster, cluster
	if s.InternalLocal {
		p.InternalEndpoints = local
	}
	if s.ExternalLocal {
		p.ExternalEndpoints = local
	}
	verdict := func(eps []Endpoint) Verdict {
		switch {
		case len(eps) > 0:
			return Forward
		case !hasAny:
			return Reject
		default:
			return Drop
		}
	}
	p.Internal, p.External = verdict(p.InternalEndpoints), verdict(p.ExternalEndpoints)
}
