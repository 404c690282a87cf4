package lab

import "testing"

// OVSIsolation counts flows, distinct masks (fields named and their
// masks), and the attacker's share by its datapath port.
func TestOVSIsolation(t *testing.T) {
	show := readTestdata(t, "ovs-dpctl-show-small.txt") // port 3: v-b
	dump := `flow-dump from the main thread:
recirc_id(0),in_port(3),packet_type(ns=0,id=0),eth_type(0x0800),ipv4(dst=10.0.0.0/255.0.0.0,frag=no), packets:1, bytes:60, used:0.1s, actions:drop
recirc_id(0),in_port(3),packet_type(ns=0,id=0),eth_type(0x0800),ipv4(dst=11.0.0.0/255.0.0.0,frag=no), packets:1, bytes:60, used:0.1s, actions:drop
recirc_id(0),in_port(3),packet_type(ns=0,id=0),eth_type(0x0800),ipv4(dst=10.128.0.0/255.128.0.0,frag=no), packets:1, bytes:60, used:0.1s, actions:drop
recirc_id(0),in_port(1),packet_type(ns=0,id=0),eth(src=02:99:00:00:00:01,dst=02:99:00:00:00:02),eth_type(0x0800),ipv4(src=10.99.0.1/255.255.255.0,dst=10.99.0.2/255.255.255.0,frag=no), packets:9, bytes:900, used:0.0s, actions:3
`
	got := OVSIsolation(show, dump, "v-b")
	want := IsolationResult{Flows: 4, Masks: 3, AttackerFlows: 3, AttackerMasks: 2, VictimDrops: -1}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if got := OVSIsolation(show, dump, "v-gone"); got.AttackerFlows != 0 || got.AttackerMasks != -1 {
		t.Fatalf("unknown attacker port: %+v", got)
	}
}
