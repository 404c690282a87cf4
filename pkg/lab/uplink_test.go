package lab

import (
	"strings"
	"testing"
)

func TestUplinkScenario(t *testing.T) {
	s, err := ParseScenario([]byte(uplinkTinyScenario))
	if err != nil {
		t.Fatal(err)
	}
	if !s.HasUplinks() {
		t.Fatal("no uplinks seen")
	}
	for _, c := range []struct {
		m       string
		clients int
		ups     string
	}{{"send-1", 1, "u1"}, {"send-2", 2, "u1 u2"}, {"recv-2", 2, "u1 u2"}} {
		for _, m := range s.Measurements {
			if m.Name == c.m {
				n, ups := s.flowPods(m)
				if n != c.clients || strings.Join(ups, " ") != c.ups {
					t.Errorf("%s: %d clients over %v, want %d over %s", c.m, n, ups, c.clients, c.ups)
				}
			}
		}
	}
	topo := newTopology(s, "nlx", map[string]bool{"a1": true, "u1": true, "u2": true}, nil, nil)
	if u := topo.Pod("u2"); u.NS != "nlx-tb" || u.Dev != "u2" || u.Tester != "tb" {
		t.Errorf("uplink u2: ns %s dev %s tester %s", u.NS, u.Dev, u.Tester)
	}
	if got := strings.Join(topo.namespaces(), " "); got != "nlx-n1 nlx-a1 nlx-tb" {
		t.Errorf("namespaces %q", got)
	}

	_, err = ParseScenario([]byte(`
name: bad
nodes: [n1]
pods: [{name: a, node: n1}, {name: u, node: n1, uplink: a}, {name: v, node: n1, uplink: Bad_Name}]
dataplanes: [veth]
reps: 1
measurements:
  - {name: t, kind: tcp, client: a, server: u}
`))
	for _, want := range []string{`uplink tester "a" is already a pod`, `uplink "Bad_Name": names are`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

func TestParseIPLinkBytes(t *testing.T) {
	js := `[{"ifindex":5,"ifname":"u1","mtu":9000,"stats64":{"rx":{"bytes":30026523,"packets":62062,"errors":0},"tx":{"bytes":1234,"packets":10,"errors":0}}}]`
	b, err := ParseIPLinkBytes(js)
	if err != nil || b.Rx != 30026523 || b.Tx != 1234 {
		t.Fatalf("%+v %v", b, err)
	}
	for _, bad := range []string{`[]`, `[{"ifname":"u1"}]`, `not json`} {
		if _, err := ParseIPLinkBytes(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}
