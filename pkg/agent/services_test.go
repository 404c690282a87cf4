package agent

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/nagare-net/nagare/pkg/agent/config"
	"github.com/nagare-net/nagare/pkg/agent/proxy"
)

// TestServiceStatus: the status lists the embedded cluster file's
// Service with its frontends, verdicts and endpoints, and says no
// connection count (the datapath side does not exist yet).
func TestServiceStatus(t *testing.T) {
	c := config.Default()
	a := &Agent{cfg: Config{NodeName: "node1", Cluster: c}, pods: map[string]*podRecord{}, remotes: map[string]*remote{}}
	a.node, _ = c.Node("node1")
	tr := proxy.NewTracker(a.proxyNode(), nil)
	svcs, slices, _ := proxy.FromClusterFile(c, a.podAddress)
	for _, s := range svcs {
		tr.UpdateService(s)
	}
	for _, s := range slices {
		tr.UpdateEndpointSlice(s)
	}
	tr.Take()
	var st Status
	for _, s := range tr.Services() {
		st.Services = append(st.Services, serviceStatus(s))
	}
	if len(st.Services) != 1 {
		t.Fatalf("services %+v", st.Services)
	}
	s := st.Services[0]
	if s.Service != "default/echo" || s.Type != "NodePort" || len(s.Ports) != 2 {
		t.Fatalf("service %+v", s)
	}
	p := s.Ports[0]
	if p.Frontends[0] != "ClusterIP 10.96.0.10:80" || p.Frontends[1] != "NodePort 192.168.77.1:30080" || p.Internal != "forward" {
		t.Errorf("port %+v", p)
	}
	if e := p.Endpoints[0]; e.Address != "10.77.1.2:8080" || e.Node != "node1" || e.State != "ready" || !e.Internal || !e.External || e.Connections != nil {
		t.Errorf("endpoint %+v", e)
	}
	if out := os.Getenv("NAGARE_TEST_STATUS_OUT"); out != "" {
		b, _ := json.Marshal(st)
		os.WriteFile(out, b, 0o644)
	}
}
