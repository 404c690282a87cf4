package config

import (
	"testing"

	"gopkg.in/yaml.v3"
)

// TestNetworkPoliciesInClusterFile: policies are read with their API
// field names and written back the same way.
func TestNetworkPoliciesInClusterFile(t *testing.T) {
	const file = `
nodes: [{name: n1, underlay: 10.0.0.1, podCIDR: 10.77.1.0/24}]
podLabels:
  default/srv: {app: srv}
networkPolicies:
- metadata: {namespace: default, name: srv-deny}
  spec:
    podSelector: {matchLabels: {app: srv}}
    policyTypes: [Ingress]
    ingress:
    - from: [{ipBlock: {cidr: 10.0.0.0/8, except: [10.77.1.0/24]}}]
      ports: [{protocol: TCP, port: 80}]
`
	c, err := Parse([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	check := func(c *Cluster) {
		t.Helper()
		if len(c.NetworkPolicies) != 1 {
			t.Fatalf("%d policies", len(c.NetworkPolicies))
		}
		np := c.NetworkPolicies[0]
		if np.Name != "srv-deny" || np.Spec.PodSelector.MatchLabels["app"] != "srv" || len(np.Spec.Ingress) != 1 ||
			np.Spec.Ingress[0].From[0].IPBlock.Except[0] != "10.77.1.0/24" || np.Spec.Ingress[0].Ports[0].Port.IntVal != 80 {
			t.Fatalf("policy read as %+v", np)
		}
		if c.PodLabels["default/srv"]["app"] != "srv" {
			t.Fatalf("pod labels %v", c.PodLabels)
		}
	}
	check(c)
	b, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := Parse(b)
	if err != nil {
		t.Fatalf("%v in\n%s", err, b)
	}
	check(c2)
}
