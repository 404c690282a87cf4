package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/lab/bookinfo"
)

const meshTinyScenario = `
name: mesh-tiny
nodes: [n1]
pods:
  - {name: client, node: n1}
  - {name: product, node: n1}
  - {name: details, node: n1}
  - {name: reviews1, node: n1}
  - {name: reviews2, node: n1}
  - {name: reviews3, node: n1}
  - {name: ratings, node: n1}
dataplanes: [nagare]
reps: 1
measurements:
  - {name: page, kind: bookinfo, client: client, server: product, duration: 1s, connections: [1],
     bookinfo: {details: details, reviews: [reviews1, reviews2, reviews3], ratings: ratings},
     proxies: [none, sidecar-in]}
`

// TestBookinfoSidecar runs the application on the nagare plane (switch,
// agent and CNI built here) without proxies and with inbound sidecars:
// the product page answers through productpage's ClusterIP at its full
// size in both, every call inside the application going through the
// Services of the agents' cluster file; with sidecars their own counters
// show every call of every page went through them (at least 3 per page:
// productpage, details, reviews; 4 when reviews v2 or v3 call ratings);
// and nothing is left: no namespace, no application or sidecar process.
func TestBookinfoSidecar(t *testing.T) {
	skipUnlessLab(t, "wrk", "nginx", "nft", "setpriv")
	dir := useBuiltNagare(t, "nagare-bookinfo")
	savedApp := BookinfoBinary
	app := filepath.Join(dir, "nagare-bookinfo")
	BookinfoBinary = func() (string, error) { return app, nil }
	defer func() { BookinfoBinary = savedApp }()

	s, err := ParseScenario([]byte(meshTinyScenario))
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("nlbi%d", os.Getpid())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, md := runScenario(ctx, t, s, prefix, true)

	if pids := processesOf(app); len(pids) > 0 {
		t.Errorf("nagare-bookinfo left behind: %v", pids)
	}
	if pids := processesWithArg(prefix + "-sidecar-"); len(pids) > 0 {
		t.Errorf("sidecars left behind: %v", pids)
	}
	if left, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"-sidecar-*")); len(left) > 0 {
		t.Errorf("sidecar directories left behind: %v", left)
	}
	if len(res.Samples) != 2 {
		t.Fatalf("%d samples, want 2 (none, sidecar-in)", len(res.Samples))
	}
	for _, smp := range res.Samples {
		if smp.Status != StatusOK || smp.Mesh == nil {
			t.Errorf("%s: %s: %s", smp.Proxy, smp.Status, smp.Error)
			continue
		}
		r := smp.Mesh
		if r.PageBytes != bookinfo.ProductPageBytes {
			t.Errorf("%s: page of %d bytes, want %d", smp.Proxy, r.PageBytes, bookinfo.ProductPageBytes)
		}
		if len(r.Steps) != 1 || r.Steps[0].Requests == 0 || r.Steps[0].Errors != 0 || r.Steps[0].P90Ms <= 0 {
			t.Errorf("%s: steps %+v", smp.Proxy, r.Steps)
		}
		switch smp.Proxy {
		case "none":
			if r.ProxyRequests != -1 {
				t.Errorf("none: %d proxied requests, want -1 (no proxies)", r.ProxyRequests)
			}
		case "sidecar-in":
			if r.ProxyRequests < 3*r.Requests || r.ProxyRequests > 4*r.Requests+16 {
				t.Errorf("sidecar-in: the sidecars counted %d requests for %d pages, want 3-4 per page", r.ProxyRequests, r.Requests)
			}
			if r.Steps[0].ProxyCPUs <= 0 {
				t.Errorf("sidecar-in: no proxy CPU accounted: %+v", r.Steps[0])
			}
		}
	}
	if !strings.Contains(md, "| nagare | sidecar-in | 1 | 1/1 |") {
		t.Errorf("report lacks the sidecar-in line:\n%s", md)
	}
}

// processesWithArg returns the PIDs whose command line has an argument
// containing s.
func processesWithArg(s string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && strings.Contains(string(b), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}
