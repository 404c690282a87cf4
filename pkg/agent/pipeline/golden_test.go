package pipeline

import (
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/nagare-net/nagare/pkg/openflow"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/*.golden from the current code")

// representativePipeline is a node with what every feature programs: two
// local pods, the gateway, two remote nodes.
func representativePipeline() *Pipeline {
	gwMAC, _ := net.ParseMAC("02:00:00:00:01:01")
	p := New(nil, Node{Name: "node1", PodCIDR: netip.MustParsePrefix("10.77.1.0/24"), ClusterCIDR: netip.MustParsePrefix("10.77.0.0/16"),
		GatewayIP: netip.MustParseAddr("10.77.1.1"), GatewayMAC: gwMAC, GatewayPort: 2, VNI: 1}, nil)
	m1, _ := net.ParseMAC("0a:58:0a:4d:01:02")
	m2, _ := net.ParseMAC("0a:58:0a:4d:01:03")
	p.SetState([]Pod{
		{Key: "3f2a9c/eth0", Name: "default/web", Port: 5, MAC: m1, IP: netip.MustParseAddr("10.77.1.2")},
		{Key: "7b01de/eth0", Name: "default/db", Port: 6, MAC: m2, IP: netip.MustParseAddr("10.77.1.3")},
	}, []RemoteNode{
		{Name: "node2", PodCIDR: netip.MustParsePrefix("10.77.2.0/24"), Underlay: netip.MustParseAddr("192.168.77.2"), Port: 3},
		{Name: "node3", PodCIDR: netip.MustParsePrefix("10.77.3.0/24"), Underlay: netip.MustParseAddr("192.168.77.3"), Port: 4},
	})
	return p
}

// TestDesiredGolden pins the complete flow set of a representative node,
// byte for byte on the wire and in ovs-ofctl's words, in the order Desired
// gives it. It was written before the pipeline's files were reshaped from
// one per table to one per feature, to prove that move changed no flow;
// any later change to a flow shows up here and is reviewed as such
// (go test -run TestDesiredGolden -update rewrites the file).
func TestDesiredGolden(t *testing.T) {
	var got bytes.Buffer
	for _, f := range representativePipeline().Desired() {
		b, err := openflow.Marshal(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		fmt.Fprintf(&got, "%s\n  %s\n", f, hex.EncodeToString(b))
	}
	path := filepath.Join("testdata", "representative-node.golden")
	if *updateGolden {
		if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("the flow set differs from %s:\n--- got\n%s\n--- want\n%s", path, got.Bytes(), want)
	}
}
