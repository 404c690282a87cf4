package k8s

import (
	"os"
	"testing"
)

// netpolFocus is Kubernetes' own NetworkPolicy e2e set (issue 20's acceptance).
const netpolFocus = `\[sig-network\] Netpol`

// netpolSkip: as conformanceSkip, and the [Feature:SCTPConnectivity]
// specs: this machine's kernel has no SCTP (socket(AF_INET, SOCK_STREAM,
// IPPROTO_SCTP) fails with EPROTONOSUPPORT), so their agnhost servers
// crash-loop and each spec waits out its pods' readiness (docs/k8s-conformance.md).
// Nothing else is skipped: the specs nagare fails are listed with why.
const netpolSkip = conformanceSkip + `|\[Feature:SCTPConnectivity\]`

// TestK8sNetpol runs Kubernetes' [sig-network] Netpol e2e specs
// (e2e.test v1.33.13) against the two-node cluster with nagare enforcing
// NetworkPolicy: `make k8s-netpol`. Long, so only with NAGARE_K8S_NETPOL=1.
// Like TestK8sConformance it reports (summary in K8S_CONFORMANCE_OUT,
// default /var/tmp/nagare-k8s-netpol) and fails only if e2e.test did not
// run or no spec ran. K8S_CONFORMANCE_FOCUS narrows the focus.
func TestK8sNetpol(t *testing.T) {
	if os.Getenv("NAGARE_K8S_NETPOL") != "1" {
		t.Skip("the Netpol e2e run is long: NAGARE_K8S_NETPOL=1 (make k8s-netpol)")
	}
	focus := netpolFocus
	if f := os.Getenv("K8S_CONFORMANCE_FOCUS"); f != "" {
		focus = f
	}
	out := os.Getenv("K8S_CONFORMANCE_OUT")
	if out == "" {
		out = "/var/tmp/nagare-k8s-netpol"
	}
	ran := 0
	for _, r := range runE2E(t, upTwoNode, focus, netpolSkip, out) {
		if r.status != "skipped" {
			ran++
		}
	}
	if ran == 0 {
		t.Fatalf("no spec of %s ran (output in %s)", focus, out)
	}
}
