package cluster

import (
	"testing"
	"time"

	"github.com/nagare-net/nagare/internal/nscluster"
	"github.com/nagare-net/nagare/pkg/agent/config"
)

// TestServicesEdges: the Service cases beyond plain load balancing, on one
// namespace cluster.
//
//   - multi (10.96.0.12): TCP 80 and UDP 80, both to port 80 of srv1 (on
//     node 1) and srv2 (node 2), which answer on TCP 80 and UDP 80: both
//     protocols reach them, in either order (Kubernetes' conformance spec
//     "should serve endpoints on same port and different protocols").
func TestServicesEdges(t *testing.T) {
	cc := config.Default()
	cc.Services = append(cc.Services,
		config.Service{Name: "multi", ClusterIP: "10.96.0.12",
			Ports: []config.ServicePort{{Name: "tcp-port", Protocol: "TCP", Port: 80}, {Name: "udp-port", Protocol: "UDP", Port: 80}},
			Endpoints: []string{"default/srv1", "10.77.2.2"}})
	c := newCluster(t, cc)
	ctx := ctxT(t, 3*time.Minute)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	add := func(n *nscluster.Node, name string) *nscluster.Pod {
		p, err := n.AddPod(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	srv1, srv2 := add(n1, "srv1"), add(n2, "srv2")
	if srv1.IP.String() != "10.77.1.2" || srv2.IP.String() != "10.77.2.2" {
		t.Fatalf("endpoint pods got %s and %s, the cluster file names 10.77.1.2 and 10.77.2.2", srv1.IP, srv2.IP)
	}
	for _, s := range []*nscluster.Pod{srv1, srv2} {
		serveName(t, podNS(s), s.Name)
		serveNameOn(t, podNS(s), s.Name, 80, 80)
	}
	cli := add(n1, "cli1")

	t.Run("udp-burst", func(t *testing.T) {
		// OpenBSD nc -u -v (the conformance specs' client) writes four
		// "X" probes and then its data, back to back, on one socket: the
		// connection's first packets arrive together, before its first
		// has been committed by the tracker. Every one must get through.
		for i := 0; i < 8; i++ {
			f := newUDPFlow(t, podNS(cli), "10.96.0.12:80")
			for j := 0; j < 5; j++ {
				if _, err := f.c.WriteTo([]byte("X"), f.to); err != nil {
					t.Fatal(err)
				}
			}
			got := 0
			b := make([]byte, 64)
			f.c.SetReadDeadline(time.Now().Add(time.Second))
			for got < 5 {
				if _, _, err := f.c.ReadFrom(b); err != nil {
					break
				}
				got++
			}
			f.c.Close()
			if got != 5 {
				t.Errorf("burst %d: %d of 5 datagrams answered", i, got)
			}
		}
	})
	t.Run("same-port-tcp-and-udp", func(t *testing.T) {
		for i := 0; i < 8; i++ {
			if name, err := tcpName(t, podNS(cli), "10.96.0.12:80"); err != nil {
				t.Fatalf("TCP %d: %v", i, err)
			} else if name != "srv1" && name != "srv2" {
				t.Fatalf("TCP %d: answer %q", i, name)
			}
			name, from, err := udpName(t, podNS(cli), "10.96.0.12:80")
			if err != nil || from != "10.96.0.12:80" {
				t.Fatalf("UDP %d after TCP: %q from %s, %v", i, name, from, err)
			}
		}
	})
}
