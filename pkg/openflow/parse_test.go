package openflow

import (
	"bytes"
	"strings"
	"testing"
)

// parsesNX says whether ParseFlow reads the Nicira extension syntax yet.
const parsesNX = true

// TestParseFlowMatchesOvsOfctl parses every add-flow command line of the
// golden files and demands the exact FLOW_MOD bytes ovs-ofctl sent.
func TestParseFlowMatchesOvsOfctl(t *testing.T) {
	for _, c := range goldenCommands {
		if !strings.HasPrefix(c.args, "add-flow SOCK ") {
			continue
		}
		if strings.HasPrefix(c.name, "add_flow_nx_") && !parsesNX {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			spec := strings.TrimPrefix(c.args, "add-flow SOCK ")
			fm, err := ParseFlow(spec)
			if err != nil {
				t.Fatal(err)
			}
			golden := goldenOf(t, c.name, TypeFlowMod)[0].(*FlowMod)
			fm.Xid = golden.Xid
			got, err := fm.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			want, _ := golden.MarshalBinary()
			if !bytes.Equal(got, want) {
				t.Fatalf("ParseFlow(%q)\n got %s\n     %x\nwant %s\n     %x", spec, fm, got, golden, want)
			}
			if err := fm.Validate(); err != nil {
				t.Fatal(err)
			}
			// Printing and parsing again is stable.
			fm2, err := ParseFlow(fm.String())
			if err != nil {
				t.Fatalf("ParseFlow(String()=%q): %v", fm.String(), err)
			}
			fm2.Xid = fm.Xid
			if got2, _ := fm2.MarshalBinary(); !bytes.Equal(got2, got) {
				t.Fatalf("String() %q does not parse back to the same flow:\n%s", fm.String(), fm2)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, s := range []string{
		"in_port=1,in_port=2,actions=drop",
		"tp_dst=80,actions=drop",
		"bogus=1,actions=drop",
		"tcp,nw_src=10.0.0.300,actions=drop",
		"actions=frobnicate",
		"actions=set_field:1->nosuchfield",
		"actions=set_field:00:11:22:33:44:55/ff:ff:ff:ff:ff:ff->eth_dst",
		"priority=70000,actions=drop",
		"dl_dst=00:11:22,actions=drop",
	} {
		if fm, err := ParseFlow(s); err == nil {
			t.Errorf("ParseFlow(%q) = %s, want error", s, fm)
		}
	}
	fm, err := ParseFlow("priority=1,ip,nw_dst=10.0.0.0/255.0.255.0,actions=output:1,CONTROLLER,copy_ttl_in,copy_ttl_out,push_pbb,pop_pbb")
	if err != nil {
		t.Fatal(err)
	}
	if got := fm.String(); got != "table=0,priority=1,ip,nw_dst=10.0.0.0/255.0.255.0,actions=output:1,CONTROLLER:65535,copy_ttl_in,copy_ttl_out,push_pbb:0x88e7,pop_pbb" {
		t.Errorf("String = %q", got)
	}
}
