package switchd

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/datapath"
)

// TestOnloadPathFallback: with --onload-path afxdp, a port whose device
// refuses XDP (a veth whose MTU does not fit a page: the kernel refuses a
// program without multi-buffer support) keeps the ring path and still
// forwards its onloaded flows, and show says which path each port is on.
func TestOnloadPathFallback(t *testing.T) {
	ts := placementSwitch(t, withOnloadPath(datapath.OnloadPathAFXDP))
	ts.Node.IP(t, "link", "set", "v2", "mtu", "9000")
	ts.setPlacement("v1", "onload")
	ts.setPlacement("v2", "onload")
	nstest.UDPEcho(t, ts.Pods[1], podIP(2)+":7000")
	if n := nstest.UDPRoundTrips(t, ts.Pods[0], podIP(2)+":7000", 50); n != 50 {
		t.Fatalf("%d of 50 UDP round trips", n)
	}
	st := ts.placementStats()
	if st.OnloadPath != "afxdp" || len(st.XDPPorts) != 1 || st.XDPPorts[0] != 1 || st.XDPRefused[2] == "" {
		t.Fatalf("placement stats %+v: want port 1 on AF_XDP, port 2 refused", st)
	}
	// Both paths carried packets: port 1's on AF_XDP, port 2's on the ring.
	if st.OnloadXDP < 40 || st.OnloadPackets-st.OnloadXDP < 40 {
		t.Fatalf("onloaded %d packets, %d through AF_XDP: want both paths used", st.OnloadPackets, st.OnloadXDP)
	}
	show := strings.Join(ts.mustControl(CtlRequest{Cmd: "show"}).Lines, "\n")
	if !strings.Contains(show, "onload path: afxdp, AF_XDP (copy mode) on ports [1]") || !strings.Contains(show, "port 2 on the ring:") {
		t.Fatalf("show does not say which path each port is on:\n%s", show)
	}
	if dr, _ := ts.dp.Drops(); len(dr) != 0 {
		t.Fatalf("drops: %v", dr)
	}
}

// TestOnloadPathRing: --onload-path ring never attaches XDP, and says so.
func TestOnloadPathRing(t *testing.T) {
	ts := placementSwitch(t, withOnloadPath(datapath.OnloadPathRing))
	ts.setPlacement("v1", "onload")
	if err := ts.ping(1, 2); err != nil {
		t.Fatal(err)
	}
	st := ts.placementStats()
	if st.OnloadPath != "ring" || len(st.XDPPorts) != 0 || st.OnloadXDP != 0 || st.OnloadPackets == 0 {
		t.Fatalf("placement stats %+v", st)
	}
	if link := ipLink(t, ts.Node, "v1"); strings.Contains(link, "xdp") {
		t.Fatalf("XDP attached on the ring path: %s", link)
	}
}

func ipLink(t *testing.T, ns nstest.NS, dev string) string {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns.Name, "link", "show", dev).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return string(out)
}

// TestOnloadPathDetach: a port put on AF_XDP by its onload placement gets
// XDP and a socket; placed offload again, once none of its flows is in
// userspace, XDP is detached (its peer gets TSO back) and the port leaves
// the AF_XDP list.
func TestOnloadPathDetach(t *testing.T) {
	ts := placementSwitch(t, withOnloadPath(datapath.OnloadPathAFXDP))
	ts.setPlacement("v1", "onload")
	if err := ts.ping(1, 2); err != nil {
		t.Fatal(err)
	}
	if link := ipLink(t, ts.Node, "v1"); !strings.Contains(link, "xdp") {
		t.Fatalf("no XDP on an onloaded port: %s", link)
	}
	if st := ts.placementStats(); len(st.XDPPorts) != 1 || st.OnloadXDP == 0 {
		t.Fatalf("placement stats %+v: want port 1 on AF_XDP, carrying the pings", st)
	}
	ts.setPlacement("v1", "offload")
	if err := ts.ping(1, 2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "XDP detached from v1", func() bool {
		ts.rv.force(false)
		return !strings.Contains(ipLink(t, ts.Node, "v1"), "xdp") && len(ts.placementStats().XDPPorts) == 0
	})
	if err := ts.ping(1, 2); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ip", "netns", "exec", ts.Pods[0].Name, "ethtool", "-k", "eth0").CombinedOutput()
	if err != nil || strings.Contains(string(out), "tx-tcp-segmentation: off [fixed]") {
		t.Fatalf("the pod's TSO is still fixed off after XDP left (%v):\n%s", err, out)
	}
}
