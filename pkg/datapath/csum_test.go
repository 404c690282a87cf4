package datapath

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestCompleteChecksum(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, tcp := range []bool{false, true} {
			src, dst := "10.0.0.1", "10.0.0.2"
			if v6 {
				src, dst = "fd00::1", "fd00::2"
			}
			var full []byte
			if tcp {
				full = tcpPkt(t, src, dst, 1001, 80, false)
			} else {
				full = udpPkt(t, src, dst, 1001, 53, "payload")
			}
			// Turn the right checksum into what CHECKSUM_PARTIAL leaves: the
			// folded pseudo-header sum.
			l3 := 14
			var pseudo uint32
			var l4 []byte
			l4off := l3 + 20
			if v6 {
				pseudo = sum16(full[l3+8 : l3+40])
				l4off = l3 + 40
				l4 = full[l4off:]
			} else {
				pseudo = sum16(full[l3+12 : l3+20])
				l4 = full[l4off : l3+int(binary.BigEndian.Uint16(full[l3+2:]))]
			}
			field, proto := 6, uint32(17)
			if tcp {
				field, proto = 16, 6
			}
			partial := append([]byte(nil), full...)
			binary.BigEndian.PutUint16(partial[l4off+field:], fold(pseudo+proto+uint32(len(l4))))
			if bytes.Equal(partial, full) {
				t.Fatal("test packet already looks partial")
			}
			completeChecksum(partial)
			if !bytes.Equal(partial, full) {
				t.Errorf("v6=%v tcp=%v: not completed:\n got %x\nwant %x", v6, tcp, partial, full)
			}
			// A wrong checksum that is not the partial pattern stays wrong.
			bad := append([]byte(nil), full...)
			bad[l4off+field] ^= 0x55
			keep := append([]byte(nil), bad...)
			completeChecksum(bad)
			if !bytes.Equal(bad, keep) {
				t.Errorf("v6=%v tcp=%v: a corrupt checksum was rewritten", v6, tcp)
			}
		}
	}
}
