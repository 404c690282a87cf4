package datapath

import (
	"testing"

	"github.com/cilium/ebpf/btf"

	"github.com/nagare-net/nagare/pkg/flow"
)

// TestKeyLayoutMatchesBTF checks that pkg/flow writes every key field where
// the compiled C struct flow_key has it (offsets from the object's BTF).
// Needs no privileges.
func TestKeyLayoutMatchesBTF(t *testing.T) {
	spec, err := loadNagare()
	if err != nil {
		t.Fatal(err)
	}
	var st *btf.Struct
	if err := spec.Types.TypeByName("flow_key", &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != flow.KeySize {
		t.Fatalf("struct flow_key is %d bytes, pkg/flow says %d", st.Size, flow.KeySize)
	}
	// Set one field at a time to a marker and find where the marker lands.
	set := map[string]func(k *flow.Key){
		"in_port":     func(k *flow.Key) { k.InPort = 0xa5 },
		"tun_id":      func(k *flow.Key) { k.TunID = 0xa5 },
		"tun_src":     func(k *flow.Key) { k.TunSrc[0] = 0xa5 },
		"tun_dst":     func(k *flow.Key) { k.TunDst[0] = 0xa5 },
		"tun_tos":     func(k *flow.Key) { k.TunTOS = 0xa5 },
		"tun_ttl":     func(k *flow.Key) { k.TunTTL = 0xa5 },
		"tun_flags":   func(k *flow.Key) { k.TunFlags = 0xa5 },
		"nw_frag":     func(k *flow.Key) { k.NwFrag = 0xa5 },
		"vlan_tci":    func(k *flow.Key) { k.VlanTCI = 0xa500 },
		"eth_type":    func(k *flow.Key) { k.EthType = 0xa500 },
		"eth_src":     func(k *flow.Key) { k.EthSrc[0] = 0xa5 },
		"eth_dst":     func(k *flow.Key) { k.EthDst[0] = 0xa5 },
		"nw_proto":    func(k *flow.Key) { k.NwProto = 0xa5 },
		"nw_tos":      func(k *flow.Key) { k.NwTOS = 0xa5 },
		"nw_ttl":      func(k *flow.Key) { k.NwTTL = 0xa5 },
		"ipv6_label":  func(k *flow.Key) { k.IPv6Label = 0xa5000000 },
		"ip_src":      func(k *flow.Key) { k.IPSrc[0] = 0xa5 },
		"ip_dst":      func(k *flow.Key) { k.IPDst[0] = 0xa5 },
		"tp_src":      func(k *flow.Key) { k.TpSrc = 0xa500 },
		"tp_dst":      func(k *flow.Key) { k.TpDst = 0xa500 },
		"tcp_flags":   func(k *flow.Key) { k.TCPFlags = 0xa500 },
		"arp_sha":     func(k *flow.Key) { k.ArpSHA[0] = 0xa5 },
		"arp_tha":     func(k *flow.Key) { k.ArpTHA[0] = 0xa5 },
		"nd_target":   func(k *flow.Key) { k.NDTarget[0] = 0xa5 },
		"recirc_id":   func(k *flow.Key) { k.RecircID = 0xa5 },
		"ct_mark":     func(k *flow.Key) { k.CtMark = 0xa5 },
		"ct_zone":     func(k *flow.Key) { k.CtZone = 0xa5 },
		"ct_state":    func(k *flow.Key) { k.CtState = 0xa5 },
		"ct_nw_proto": func(k *flow.Key) { k.CtNwProto = 0xa5 },
		"ct_tp_src":   func(k *flow.Key) { k.CtTpSrc = 0xa500 },
		"ct_tp_dst":   func(k *flow.Key) { k.CtTpDst = 0xa500 },
		"ct_label":    func(k *flow.Key) { k.CtLabel[0] = 0xa5 },
		"ct_nw_src":   func(k *flow.Key) { k.CtNwSrc[0] = 0xa5 },
		"ct_nw_dst":   func(k *flow.Key) { k.CtNwDst[0] = 0xa5 },
		"dp_hash":     func(k *flow.Key) { k.DpHash = 0xa5 },
	}
	seen := 0
	for _, m := range st.Members {
		f, ok := set[m.Name]
		if !ok {
			if m.Name[:3] != "pad" {
				t.Errorf("C field %s has no Go twin", m.Name)
			}
			continue
		}
		seen++
		var k flow.Key
		f(&k)
		b, _ := k.MarshalBinary()
		at := -1
		for i, v := range b {
			if v == 0xa5 {
				at = i
				break
			}
		}
		if want := int(m.Offset.Bytes()); at != want {
			t.Errorf("%s: Go writes it at byte %d, C has it at %d", m.Name, at, want)
		}
	}
	if seen != len(set) {
		t.Errorf("matched %d of %d fields", seen, len(set))
	}
}
