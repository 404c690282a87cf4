package nstest

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// RawSocket opens an AF_PACKET socket on dev inside n, for frames that
// the stack would not send (a VLAN tag without a VLAN device: this kernel
// has no 8021q) or would hide (tags the receiving kernel keeps in skb
// metadata, see ReadFrame). Closed by t.Cleanup.
func RawSocket(t testing.TB, n NS, dev string) int {
	t.Helper()
	var fd int
	var err error
	n.In(t, func() {
		var ifc *net.Interface
		if ifc, err = net.InterfaceByName(dev); err != nil {
			return
		}
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL))); err != nil {
			return
		}
		if err = unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifc.Index}); err != nil {
			return
		}
		err = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// ReadFrame returns the next frame on a RawSocket that contains match, as
// it was on the wire: a VLAN tag the receiving kernel moved into skb
// metadata (it does so for every tagged frame) is put back after the MAC
// addresses. It fails the test after timeout.
func ReadFrame(t testing.TB, fd int, match []byte, timeout time.Duration) []byte {
	t.Helper()
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 65536)
	oob := make([]byte, 256)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("no frame with %q within %v", match, timeout)
		}
		tv := unix.NsecToTimeval(left.Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			t.Fatal(err)
		}
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
		if err != nil {
			if err == unix.EAGAIN || err == unix.EINTR {
				continue
			}
			t.Fatal(err)
		}
		frame := buf[:n]
		if !bytes.Contains(frame, match) {
			continue
		}
		out := append([]byte(nil), frame...)
		cms, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for _, cm := range cms {
			if cm.Header.Level != unix.SOL_PACKET || cm.Header.Type != unix.PACKET_AUXDATA || len(cm.Data) < int(unsafe.Sizeof(unix.TpacketAuxdata{})) {
				continue
			}
			aux := (*unix.TpacketAuxdata)(unsafe.Pointer(&cm.Data[0]))
			if aux.Status&unix.TP_STATUS_VLAN_VALID == 0 || len(out) < 12 {
				continue
			}
			tpid := aux.Vlan_tpid
			if aux.Status&unix.TP_STATUS_VLAN_TPID_VALID == 0 || tpid == 0 {
				tpid = unix.ETH_P_8021Q
			}
			tag := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, tpid), aux.Vlan_tci)
			out = append(out[:12], append(tag, out[12:]...)...)
		}
		return out
	}
}
