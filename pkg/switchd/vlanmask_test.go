package switchd

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nagare-net/nagare/internal/nstest"
)

// TestMaskedVLANVIDOnTheWire: ovs-ofctl's vlan_vid=0x60/0xf0 is accepted
// (it was OFPBMC_BAD_VALUE) and forwards real tagged frames whose VID has
// those bits (0x65, by the slow path then the fast path) but not 0x75.
func TestMaskedVLANVIDOnTheWire(t *testing.T) {
	ts := startSwitch(t, 2, nil)
	ts.ofctl("add-flow", "priority=10,in_port=1,vlan_vid=0x60/0xf0,actions=output:2")
	if out := ts.ofctl("dump-flows"); !strings.Contains(out, "0x0060/0x00f0") {
		t.Fatalf("dump-flows lacks the masked VID:\n%s", out)
	}
	rx := nstest.RawSocket(t, ts.Pods[1], "eth0")
	tx := nstest.RawSocket(t, ts.Pods[0], "eth0")
	send := func(vid uint16, payload string) {
		if _, err := unix.Write(tx, taggedFrame(t, vid, payload)); err != nil {
			t.Fatal(err)
		}
	}
	for _, what := range []string{"vid 0x65 first", "vid 0x65 second"} {
		send(0x65, what)
		if ids := vlanIDs(nstest.ReadFrame(t, rx, []byte(what), 5*time.Second)); len(ids) != 1 || ids[0] != 0x65 {
			t.Fatalf("%s arrived with VLAN ids %v", what, ids)
		}
	}
	send(0x75, "vid 0x75 must not pass")
	send(0x75, "vid 0x75 must not pass")
	tv := unix.NsecToTimeval((200 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(rx, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		n, _, err := unix.Recvfrom(rx, buf, 0)
		if err == nil && bytes.Contains(buf[:n], []byte("0x75")) {
			t.Fatalf("a frame of VID 0x75 was forwarded by vlan_vid=0x60/0xf0")
		}
	}
}
