package proxy

import (
	"net/netip"
	"testing"

	"github.com/nagare-net/nagare/pkg/agent/config"
)

// TestClusterFile: the cluster file's services section gives the state
// the same Service from the API server would: frontends, named pods
// resolved on their node, endpoint nodes from the pod CIDRs, bad values
// reported by the proxy rather than refusing the file.
func TestClusterFile(t *testing.T) {
	c, err := config.Parse([]byte(`
clusterCIDR: 10.77.0.0/16
nodes:
  - {name: node1, underlay: 192.168.77.1, podCIDR: 10.77.1.0/24}
  - {name: node2, underlay: 192.168.77.2, podCIDR: 10.77.2.0/24}
services:
  - name: web
    namespace: shop
    type: NodePort
    clusterIP: 10.96.0.20
    externalTrafficPolicy: Local
    sessionAffinity: ClientIP
    sessionAffinityTimeout: 600
    ports:
      - {name: http, port: 80, targetPort: 8080, nodePort: 30080}
      - {name: dns, protocol: UDP, port: 53}
    endpoints: [web-0, default/other, 10.77.2.7, 10.77.2.300, web-9]
  - name: broken
    clusterIP: 10.96.0.21
    ports: [{port: 99999}]
  - name: lb
    type: LoadBalancer
    clusterIP: 10.96.0.22
    loadBalancerIPs: [203.0.113.9]
    ports: [{port: 443, nodePort: 30443}]
`))
	if err != nil {
		t.Fatal(err)
	}
	pods := func(name string) (netip.Addr, bool) {
		switch name {
		case "shop/web-0":
			return netip.MustParseAddr("10.77.1.5"), true
		case "default/other":
			return netip.MustParseAddr("10.77.1.6"), true
		}
		return netip.Addr{}, false
	}
	svcs, slices, unresolved := FromClusterFile(c, pods)
	if len(unresolved) != 1 || unresolved[0] != "shop/web-9" {
		t.Errorf("unresolved %v", unresolved)
	}
	var objs []any
	for _, s := range svcs {
		objs = append(objs, s)
	}
	for _, s := range slices {
		objs = append(objs, s)
	}
	st, problems := state(t, objs...)
	web := st["shop/web"]
	if web == nil || len(web.Ports) != 2 || !web.ExternalLocal || !web.Affinity.ClientIP || web.Affinity.Timeout.Seconds() != 600 {
		t.Fatalf("web: %+v", web)
	}
	http := web.Ports[0]
	if got := frontends(http.Frontends); got != "ClusterIP:10.96.0.20:80 NodePort:192.168.77.1:30080" {
		t.Errorf("frontends %s", got)
	}
	if got := addrs(http.Endpoints); got != "10.77.1.5:8080 10.77.1.6:8080 10.77.2.7:8080" {
		t.Errorf("endpoints %s", got)
	}
	if got := addrs(http.ExternalEndpoints); got != "10.77.1.5:8080 10.77.1.6:8080" {
		t.Errorf("external (Local) endpoints %s", got)
	}
	if http.Endpoints[0].Pod != "shop/web-0" || http.Endpoints[2].NodeName != "node2" {
		t.Errorf("endpoint details %+v", http.Endpoints)
	}
	if dns := web.Ports[1]; dns.Protocol != UDP || addrs(dns.Endpoints) != "10.77.1.5:53 10.77.1.6:53 10.77.2.7:53" {
		t.Errorf("dns: %s %s", dns.Protocol, addrs(dns.Endpoints))
	}
	if lb := st["default/lb"]; lb == nil || frontends(lb.Ports[0].Frontends) != "ClusterIP:10.96.0.22:443 NodePort:192.168.77.1:30443 LoadBalancer:203.0.113.9:443" {
		t.Errorf("lb: %+v", lb)
	}
	if b := st["default/broken"]; b == nil || len(b.Ports) != 0 {
		t.Errorf("broken: %+v", b)
	}
	reasons := map[string]bool{}
	for _, p := range problems {
		reasons[p.Name+" "+p.Reason] = true
	}
	if !reasons["broken "+ReasonInvalidPort] || !reasons["web-file "+ReasonInvalidAddress] || len(problems) != 2 {
		t.Errorf("problems %v", problems)
	}
}

// TestDefaultClusterFileServices: the embedded file's Services compute.
func TestDefaultClusterFileServices(t *testing.T) {
	c := config.Default()
	svcs, slices, _ := FromClusterFile(c, func(string) (netip.Addr, bool) { return netip.Addr{}, false })
	tr := NewTracker(Node{Name: "node1", Addresses: []netip.Addr{netip.MustParseAddr("192.168.77.1")}, PodNetwork: c.PodNetwork()}, nil)
	for _, s := range svcs {
		tr.UpdateService(s)
	}
	for _, s := range slices {
		tr.UpdateEndpointSlice(s)
	}
	tr.Take()
	if len(tr.Services()) != len(c.Services) || len(tr.Problems()) != 0 {
		t.Fatalf("services %v problems %v", tr.Services(), tr.Problems())
	}
}
