package lab

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

const servicesTinyScenario = `
name: services-tiny
nodes: [n1]
pods: [{name: c, node: n1}, {name: s, node: n1}]
dataplanes: [kube-proxy-iptables, kube-proxy-nftables]
reps: 1
measurements:
  - {name: svc-rtt, kind: rtt, client: c, server: s, via: clusterip, duration: 1s}
  - {name: pod-conn, kind: conn-rate, client: c, server: s, duration: 1s}
  - {name: svc-conn, kind: conn-rate, client: c, server: s, via: clusterip, baseline: pod-conn, duration: 1s}
  - {name: np-tcp, kind: tcp, client: c, server: s, via: nodeport, duration: 1s}
  - {name: scale, kind: service-scale, client: c, server: s, services: [1, 20, 5], duration: 1s}
`

// TestServicesKubeProxyTiny runs the Services kinds against the real
// kube-proxy in both modes, fed by the run's own etcd + kube-apiserver:
// every test through a ClusterIP or NodePort carries traffic, the 19
// fillers are programmed (probed through their ClusterIPs), and nothing
// is left: no namespace, no kube-proxy.
func TestServicesKubeProxyTiny(t *testing.T) {
	skipUnlessLab(t, "sockperf", "iperf3", "wrk", "nginx")
	if err := kubeAPIAvailable(); err != nil {
		t.Skip(err)
	}
	kp, err := kubeBinary("kube-proxy")
	if err != nil {
		t.Skip(err)
	}
	s, err := ParseScenario([]byte(servicesTinyScenario))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, _ := runScenario(ctx, t, s, fmt.Sprintf("nlsv%d", os.Getpid()), true)
	if pids := processesOf(kp); len(pids) > 0 {
		t.Errorf("kube-proxy left behind: %v", pids)
	}
	if len(res.Samples) != 10 {
		t.Fatalf("%d samples, want 10 (5 tests × 2 planes)", len(res.Samples))
	}
	for _, smp := range res.Samples {
		if smp.Status != StatusOK {
			t.Errorf("%s %s: %s: %s", smp.DataPlane, smp.Measurement, smp.Status, smp.Error)
			continue
		}
		switch smp.Kind {
		case KindConnRate:
			if smp.ConnRate == nil || smp.ConnRate.ConnPerSec <= 0 {
				t.Errorf("%s %s: no connections: %+v", smp.DataPlane, smp.Measurement, smp.ConnRate)
			}
		case KindServiceScale:
			if len(smp.Scale) != 3 || smp.Scale[1].Changed != 19 || smp.Scale[1].ProgrammedSeconds <= 0 || smp.Scale[2].Changed != -15 {
				t.Errorf("%s: steps %+v", smp.DataPlane, smp.Scale)
			}
			for _, st := range smp.Scale {
				if st.Connects == 0 || st.P50Us <= 0 {
					t.Errorf("%s: %d Services: no first-packet times: %+v", smp.DataPlane, st.Services, st)
				}
			}
		case KindTCP:
			if smp.TCP == nil || smp.TCP.Gbps <= 0 {
				t.Errorf("%s %s: no throughput", smp.DataPlane, smp.Measurement)
			}
		}
	}
}
