package openflow

import "testing"

func TestMatchKeyCovers(t *testing.T) {
	pkt := func(fields ...OXM) MatchKey {
		k, err := PacketKey(fields...)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	tcp80 := pkt(Uint(FieldInPort, 1), MAC(FieldEthDst, mustMAC("00:11:22:33:44:55")), ipv4,
		Addr(FieldIPv4Src, addr("10.1.2.3")), tcp, Uint(FieldTCPDst, 80))
	vlan10 := pkt(Uint(FieldInPort, 3), Uint(FieldVLANVID, uint64(VIDPresent)|10), Uint(FieldVLANPCP, 3),
		MAC(FieldEthDst, mustMAC("01:00:5e:00:00:01")))
	cases := []struct {
		flow string
		pkt  MatchKey
		want bool
	}{
		{"in_port=1,tcp,nw_src=10.0.0.0/8,tp_dst=80", tcp80, true},
		{"in_port=1,tcp,nw_src=10.0.0.0/8,tp_dst=443", tcp80, false},
		{"in_port=2,tcp", tcp80, false},
		{"tcp,nw_src=11.0.0.0/8", tcp80, false},
		{"udp", tcp80, false},
		{"", tcp80, true},
		{"dl_dst=00:11:22:33:44:55", tcp80, true},
		{"vlan_tci=0x0000/0x1fff", tcp80, true}, // untagged
		{"vlan_tci=0x0000/0x1fff", vlan10, false},
		{"vlan_tci=0x1000/0x1000", vlan10, true}, // any tag
		{"vlan_tci=0x1000/0x1000", tcp80, false},
		{"dl_vlan=10,dl_vlan_pcp=3", vlan10, true},
		{"dl_vlan=11", vlan10, false},
		{"dl_dst=01:00:00:00:00:00/01:00:00:00:00:00", vlan10, true}, // multicast
		{"dl_dst=01:00:00:00:00:00/01:00:00:00:00:00", tcp80, false},
		{"ipv6", tcp80, false},
	}
	for _, c := range cases {
		m, err := ParseMatch(c.flow)
		if err != nil {
			t.Fatal(err)
		}
		k, err := m.Key()
		if err != nil {
			t.Fatal(err)
		}
		if got := k.Covers(&c.pkt); got != c.want {
			t.Errorf("%q covers packet = %v, want %v", c.flow, got, c.want)
		}
	}
	_, err := Match{}.Add(OXM{Class: ClassNXM1, Value: []byte{1, 2, 3, 4}}).Key()
	wantErr(t, err, ErrTypeBadMatch, BadMatchBadField)
}
