package pipeline

import (
	"strings"
	"testing"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// TestDesired checks the declared pipeline: every flow is valid OpenFlow
// 1.3 for nagare's codec, sits in a declared table, carries the cookie of
// its feature and object, no two flows collide, and every table has a
// default.
func TestDesired(t *testing.T) {
	p := withAffinityService(representativePipeline())
	fs := p.Desired()
	if want := 33 + 2*7 + 2*6 + 8 + 5; len(fs) != want {
		t.Fatalf("%d flows, want %d (33 node-wide, 7 per pod, 6 per remote node, 8 for the Service (2 of them hairpin), 5 for the affinity one (1 hairpin))", len(fs), want)
	}
	declared := map[uint8]bool{}
	for _, tb := range Tables() {
		declared[tb.ID] = true
	}
	defaults := map[uint8]bool{}
	ids := map[string]string{}
	objects := map[uint64]int{}
	for _, f := range fs {
		if err := f.Validate(); err != nil {
			t.Errorf("invalid flow %s: %v", f, err)
		}
		if _, err := openflow.Marshal(f); err != nil {
			t.Errorf("flow %s does not encode: %v", f, err)
		}
		if !declared[f.TableID] {
			t.Errorf("flow in undeclared table %d: %s", f.TableID, f)
		}
		if f.Priority == prioDefault && len(f.Match.Fields) == 0 {
			defaults[f.TableID] = true
		}
		id := flowID(f.TableID, f.Priority, f.Match)
		if o, dup := ids[id]; dup {
			t.Errorf("two flows with the same table, priority and match:\n%s\n%s", o, f)
		}
		ids[id] = f.String()
		objects[f.Cookie]++
	}
	for _, tb := range Tables() {
		if !defaults[tb.ID] {
			t.Errorf("table %s has no default flow", tb.Name)
		}
	}
	for obj, want := range map[uint64]int{localObject(): 33, serviceObject(representativeService().Key): 8, serviceObject(affinityService().Key): 5, podObject("3f2a9c/eth0"): 7, podObject("7b01de/eth0"): 7, nodeObject("node2"): 6, nodeObject("node3"): 6} {
		if objects[obj] != want {
			t.Errorf("cookie %#x: %d flows, want %d", obj, objects[obj], want)
		}
	}
	if podObject("3f2a9c/eth0")&cookieFeature != cookiePod || nodeObject("node2")&cookieFeature != cookieRemote ||
		serviceObject(representativeService().Key)&cookieFeature != cookieService {
		t.Error("cookie feature bits wrong")
	}
}

// TestFlowsSay pins the flows that decide forwarding, in ovs-ofctl's words.
func TestFlowsSay(t *testing.T) {
	var all []string
	for _, f := range representativePipeline().Desired() {
		all = append(all, f.String())
	}
	text := strings.Join(all, "\n")
	for _, want := range []string{
		// a pod sends only as itself
		"table=10,priority=200,ip,in_port=5,dl_src=0a:58:0a:4d:01:02,nw_src=10.77.1.2",
		"table=10,priority=200,arp,in_port=5,dl_src=0a:58:0a:4d:01:02,arp_spa=10.77.1.2,arp_sha=0a:58:0a:4d:01:02",
		// ARP to its target only
		"table=20,priority=200,arp,arp_op=1,arp_tpa=10.77.1.3 actions=output:6",
		// remote pods through the tunnel, TTL-1
		"table=40,priority=200,ip,metadata=0x1/0x3,dl_dst=02:00:00:00:01:01,nw_dst=10.77.2.0/24 actions=dec_ttl,set_field:0x1->tun_id,output:3",
		// intra-node by MAC
		"table=50,priority=200,dl_dst=0a:58:0a:4d:01:03 actions=output:6",
	} {
		if !containsFlow(text, want) {
			t.Errorf("no flow like\n  %s\nin\n%s", want, text)
		}
	}
}

// containsFlow compares ignoring cookie and field order details that
// FlowMod.String prints.
func containsFlow(text, want string) bool {
	for _, l := range strings.Split(text, "\n") {
		ok := true
		for _, part := range strings.FieldsFunc(want, func(r rune) bool { return r == ',' || r == ' ' }) {
			if !strings.Contains(l, part) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}
