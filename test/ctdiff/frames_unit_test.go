package ctdiff

import (
	"strings"
	"testing"
)

// The decoder the comparison rests on, without root: built frames decode
// to the fields they were built with, checksums are verified, a broken
// one is reported, stamps read back as ct_state.
func TestDescribeFrames(t *testing.T) {
	_, f, err := tcp("client", at(cIP, 1234), at(vip, 80), "SA", 7, 9).build(0x1234, nil)
	if err != nil {
		t.Fatal(err)
	}
	fs := describe(f)
	for name, want := range map[string]string{
		"ip_src": cIP, "ip_dst": vip, "ip_id": "4660", "tp_src": "1234", "tp_dst": "80",
		"tcp_flags": "SA", "tcp_seq": "7", "tcp_ack": "9", "ip_csum": "ok", "l4_csum": "ok",
		"ct_state": "(not stamped)", "eth_dst": gatewayMAC,
	} {
		if got := value(fs, name); got != want {
			t.Errorf("%s = %q, want %q (%s)", name, got, want, summary(fs))
		}
	}
	_, bad, err := udp("client", at(cIP, 1), at(b1IP, 2), "x").corrupt().build(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := value(describe(bad), "l4_csum"); !strings.HasPrefix(got, "BAD") {
		t.Errorf("corrupted UDP checksum reads %q", got)
	}

	// A stamped frame (+trk+est+rpl) and an ICMP error quoting a UDP
	// datagram as it arrived.
	stamped := append([]byte(nil), f...)
	copy(stamped[6:12], mustMAC(stampPrefix+"2a"))
	if got := value(describe(stamped), "ct_state"); got != "+est+rpl+trk" {
		t.Errorf("stamp 0x2a reads %q", got)
	}
	_, dgram, _ := udp("client", at(cIP, 5000), at(b1IP, 53), "query").build(2, nil)
	from, icmp, err := icmpError(1, 3, 3).build(3, [][]arrival{{{at: "b1", frame: dgram}}})
	if err != nil || from != "b1" {
		t.Fatalf("ICMP error from %q: %v", from, err)
	}
	fs = describe(icmp)
	for name, want := range map[string]string{
		"ip_src": b1IP, "ip_dst": cIP, "icmp_type": "3", "icmp_code": "3", "icmp_csum": "ok",
		"inner_ip_src": cIP, "inner_ip_dst": b1IP, "inner_tp_src": "5000", "inner_tp_dst": "53",
		"inner_ip_csum": "ok", "inner_l4_csum": "ok",
	} {
		if got := value(fs, name); got != want {
			t.Errorf("%s = %q, want %q (%s)", name, got, want, summary(fs))
		}
	}
	if _, _, err := udpReply(1, "x").build(4, [][]arrival{nil}); err == nil {
		t.Error("a reply to a dropped packet was built")
	}
}

// checkAddr takes ports and port ranges.
func TestCheckAddr(t *testing.T) {
	for _, c := range []struct {
		want, ip, port string
		ok             bool
	}{
		{"10.0.0.1:80", "10.0.0.1", "80", true},
		{"10.0.0.1:80", "10.0.0.1", "81", false},
		{"10.0.0.1:2000-2010", "10.0.0.1", "2010", true},
		{"10.0.0.1:2000-2010", "10.0.0.1", "2011", false},
		{"10.0.0.1", "10.0.0.1", "", true},
		{"10.0.0.1", "10.0.0.2", "", false},
		{"[fd00::1]:80", "fd00::1", "80", true},
		{"[fd00::1]:80", "fd00::1", "81", false},
		{"fd00::1", "fd00::1", "80", true},
	} {
		if got := checkAddr(c.want, c.ip, c.port) == ""; got != c.ok {
			t.Errorf("checkAddr(%s, %s:%s) ok=%v", c.want, c.ip, c.port, got)
		}
	}
}
