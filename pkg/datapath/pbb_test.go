package datapath

import (
	"bytes"
	"testing"

	"github.com/nagare-net/nagare/pkg/flow"
)

// pbbFrame encapsulates inner in an I-TAG with isid behind backbone
// addresses bda/bsa.
func pbbFrame(inner []byte, bda, bsa [6]byte, isid uint32) []byte {
	b := append(append([]byte(nil), bda[:]...), bsa[:]...)
	b = append(b, 0x88, 0xe7, 0, byte(isid>>16), byte(isid>>8), byte(isid))
	return append(b, inner...)
}

// TestPBBActions: push_pbb, pop_pbb and set(pbb(isid)) with BPF_PROG_RUN,
// and the parser keying the I-TAG.
func TestPBBActions(t *testing.T) {
	d := newTestDP(t)
	inner := udpPkt(t, "10.0.0.1", "10.0.0.2", 40000, 2000, "pbb payload")
	bda, bsa := [6]byte{2, 0xb, 0, 0, 0, 1}, [6]byte{2, 0xb, 0, 0, 0, 2}
	for _, tc := range []struct {
		name string
		in   []byte
		acts []flow.Action
		want []byte
	}{
		{"push", inner, []flow.Action{flow.PushPBB{ISID: 0x123456}}, pbbFrame(inner, macB, macA, 0x123456)},
		{"push-then-rewrite-backbone", inner, []flow.Action{flow.PushPBB{ISID: 7}, flow.SetEthDst{MAC: bda[:]}, flow.SetEthSrc{MAC: bsa[:]}},
			pbbFrame(inner, bda, bsa, 7)},
		{"pop", pbbFrame(inner, bda, bsa, 9), []flow.Action{flow.PopPBB{}}, inner},
		{"set-isid", pbbFrame(inner, bda, bsa, 9), []flow.Action{flow.SetPBBISID{ISID: 0xabcdef}}, pbbFrame(inner, bda, bsa, 0xabcdef)},
		{"pop-leaves-non-pbb-alone", inner, []flow.Action{flow.PopPBB{}, flow.SetPBBISID{ISID: 1}}, inner},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if out := d.forward(t, tc.in, tc.acts...); !bytes.Equal(out, tc.want) {
				t.Fatalf("out\n got %x\nwant %x", out, tc.want)
			}
		})
	}
	k, err := flow.ParsePacket(pbbFrame(inner, bda, bsa, 0x123456))
	if err != nil || k.EthType != 0x88e7 || [4]byte(k.IPSrc[:4]) != [4]byte{0, 0x12, 0x34, 0x56} {
		t.Fatalf("key %s, %v", flow.Format(k, flow.Present(k)), err)
	}
	sameAsGo(t, pbbFrame(inner, bda, bsa, 0x123456), parse(t, pbbFrame(inner, bda, bsa, 0x123456)))
}
