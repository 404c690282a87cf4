package cluster

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/agent/config"
	"github.com/nagare-net/nagare/pkg/switchd"
)

// TestServicesShortConnections: a client makes short connections (the
// server closes first, as HTTP with "Connection: close"), to the endpoint
// directly and through a ClusterIP onto it, from a port range of 64, on
// several threads: client ports are reused at once, across the two
// destinations, while the old connections are in TIME_WAIT, and both
// sides' FINs are handled on both CPUs at the same moment. Every
// connection must succeed, none may be left half closed (both FINs seen:
// TIME_WAIT), and nothing is dropped for want of a reply tuple or of the
// port's budget. Found by the lab's conn/s measurement: a FIN lost to a
// racing CPU left connections half closed for minutes with their tuples
// taken, and SYNs onto them were dropped; a client reusing a port across
// the two destinations met the endpoint's TIME_WAIT.
func TestServicesShortConnections(t *testing.T) {
	cc := config.Default()
	cc.Services = []config.Service{{Name: "short", ClusterIP: "10.96.0.30",
		Ports: []config.ServicePort{{Name: "tcp", Protocol: "TCP", Port: 80, TargetPort: 8080}}, Endpoints: []string{"10.77.1.2"}}}
	c := newCluster(t, cc)
	ctx := ctxT(t, 4*time.Minute)
	n1 := c.Nodes[0]
	srv := addPod(ctx, t, n1, "srv")
	if srv.IP.String() != "10.77.1.2" {
		t.Fatalf("endpoint pod got %s, the Service names 10.77.1.2", srv.IP)
	}
	serveName(t, podNS(srv), "srv")
	cli := addPod(ctx, t, n1, "cli")
	if out, err := cli.Exec("sysctl", "-w", "net.ipv4.ip_local_port_range=40000 40063"); err != nil {
		t.Fatalf("port range: %v %s", err, out)
	}

	const threads, each = 4, 300
	var mu sync.Mutex
	var failed []string
	var wg sync.WaitGroup
	for w := 0; w < threads; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				to := "10.96.0.30:80"
				if (i+w)%2 == 0 {
					to = "10.77.1.2:8080"
				}
				if name, err := tcpNameToEOF(t, podNS(cli), to); err != nil || name != "srv" {
					mu.Lock()
					failed = append(failed, fmt.Sprintf("%s #%d: %q %v", to, i, name, err))
					mu.Unlock()
				}
			}
		}(w)
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Errorf("%d of %d connections failed, first: %v", len(failed), threads*each, failed[:min(5, len(failed))])
	}

	// Every connection closed both ways: the last ACKs are on their way
	// for a moment at most.
	var half []string
	for deadline := time.Now().Add(15 * time.Second); ; {
		resp, err := switchd.Call(ctx, n1.SwitchSocket(), switchd.CtlRequest{Cmd: "conntrack"})
		if err != nil {
			t.Fatal(err)
		}
		half = half[:0]
		for _, l := range resp.Lines {
			if strings.Contains(l, " FIN_WAIT ") || strings.Contains(l, " CLOSE_WAIT ") || strings.Contains(l, " ESTABLISHED ") {
				half = append(half, l)
			}
		}
		if len(half) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(half) > 0 {
		t.Errorf("%d connections not closed both ways 15 s after the last one ended, first: %v", len(half), half[:min(5, len(half))])
	}
	resp, err := switchd.Call(context.Background(), n1.SwitchSocket(), switchd.CtlRequest{Cmd: "show"})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range resp.Lines {
		if strings.Contains(l, "nat-no-port") || strings.Contains(l, "ct-port-budget") || strings.Contains(l, "ct-table-full") {
			t.Errorf("switch: %s", strings.TrimSpace(l))
		}
	}
}

// tcpNameToEOF is tcpName reading until the server closes: the server's
// FIN comes first, so the client's port is never held in TIME_WAIT (with
// 64 ports that would run out, and the test would measure the client).
func tcpNameToEOF(t *testing.T, ns nstest.NS, addr string) (string, error) {
	c, err := dialIn(t, ns, addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	b, err := io.ReadAll(c)
	return strings.TrimSpace(string(b)), err
}
