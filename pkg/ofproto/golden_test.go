package ofproto

import (
	"bufio"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// TestOvsOfctlFeatureFlowsAccepted: the FLOW_MODs ovs-ofctl sends for the
// MPLS, ND and SCTP features (bytes captured from ovs-ofctl -O OpenFlow13
// in ../openflow/testdata/golden) are accepted by the pipeline; each was
// refused before these features.
func TestOvsOfctlFeatureFlowsAccepted(t *testing.T) {
	for _, name := range []string{"add_flow_mpls", "add_flow_push_mpls", "add_flow_mpls_ttl", "add_flow_set_sctp",
		"add_flow_set_nd", "add_flow_set_nd_tll"} {
		t.Run(name, func(t *testing.T) {
			p, _ := newTestPipeline(t, 3)
			f, err := os.Open(filepath.Join("..", "openflow", "testdata", "golden", name+".hex"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			n := 0
			for sc := bufio.NewScanner(f); sc.Scan(); {
				line := strings.TrimSpace(sc.Text())
				if line == "" || strings.HasPrefix(line, "#") {
					continue
				}
				raw, err := hex.DecodeString(line)
				if err != nil {
					t.Fatal(err)
				}
				m, err := openflow.Unmarshal(raw)
				if err != nil {
					t.Fatal(err)
				}
				if fm, ok := m.(*openflow.FlowMod); ok {
					n++
					if _, err := p.FlowMod(fm); err != nil {
						t.Fatalf("FLOW_MOD from ovs-ofctl refused: %v", err)
					}
				}
			}
			if n == 0 {
				t.Fatal("no FLOW_MOD in the capture")
			}
		})
	}
}
