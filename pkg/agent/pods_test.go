package agent

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/nagare-net/nagare/pkg/agent/podnet"
	"github.com/nagare-net/nagare/pkg/ctlproto"
)

// refusingStore is the IPAM database with a disk that refuses the
// record (full, read-only) but not the allocation.
type refusingStore struct{ podStore }

func (refusingStore) SetAttachment(string, string, []byte) error {
	return errors.New("write /var/lib/nagare/ipam.db: no space left on device")
}

// TestAddRecordNotSaved: an ADD whose record cannot be saved fails with a
// CNI error and undoes what it made (host end, port, flows, address).
// Before: it answered success, and the next agent restart, finding an
// allocation without a record, deleted the pod's flows.
func TestAddRecordNotSaved(t *testing.T) {
	ta := newTestAgent(t, nil)
	ta.ipam = refusingStore{ta.store}
	_, err := ta.Add(context.Background(), addReq("c1", "default/a"))
	var te *types.Error
	if !errors.As(err, &te) || !strings.Contains(te.Msg, "no space left") {
		t.Fatalf("ADD: %v, want a CNI error saying the record was not saved", err)
	}
	if _, ok := ta.sw.port(podnet.HostIfName("c1", "eth0")); ok {
		t.Error("the switch port stayed")
	}
	if n := ta.podNet.count(); n != 0 {
		t.Errorf("%d host ends stayed", n)
	}
	if used, _ := ta.store.Stats(); used != 0 {
		t.Errorf("%d addresses stayed allocated", used)
	}
	if n := ta.podCount(); n != 0 {
		t.Errorf("%d pods known", n)
	}
	if f := ta.flowsNaming("10.77.1.2"); len(f) != 0 {
		t.Errorf("the pod's flows stayed: %v", f)
	}
}

// TestPodPortUnderLock: the pod's port number that ADD learns is written
// under the agent's lock, as everything else reads it (a reconnection's
// sync, status, direct forward). Run with -race: before, ADD wrote it
// bare while a reader could hold the record.
func TestPodPortUnderLock(t *testing.T) {
	ta := newTestAgent(t, nil)
	key := podKey("c1", "eth0")
	reading := make(chan struct{}, 1)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			ta.mu.Lock()
			if p := ta.pods[key]; p != nil {
				select {
				case reading <- struct{}{}: // before the read: no ordering with ADD's write
				default:
				}
				_ = p.OFPort
				ta.pipelineStateLocked()
			}
			ta.mu.Unlock()
		}
	}()
	ta.sw.before = func(req ctlproto.Request) {
		if req.Cmd == "port-add" && req.Name == podnet.HostIfName("c1", "eth0") {
			<-reading // the reader has the record
		}
	}
	_, err := ta.Add(context.Background(), addReq("c1", "default/a"))
	close(stop)
	<-done
	if err != nil {
		t.Fatal(err)
	}
}

// TestGatewayRenumbered: after a switch restart that gives the gateway
// another port number, the node's flows (classifier, ARP, L2 to the
// gateway) name the new number. Before: Pipeline.SetNode was never
// called and they kept the old one.
func TestGatewayRenumbered(t *testing.T) {
	ta := newTestAgent(t, nil)
	if no, _ := ta.sw.port("nagare0"); no != 1 {
		t.Fatalf("gateway port %d", no)
	}
	ta.sw.restart(7)
	ta.reconnect(t)
	if no, _ := ta.sw.port("nagare0"); no != 7 {
		t.Fatalf("gateway port after restart %d", no)
	}
	if f := ta.flowsNaming("in_port=7"); len(f) == 0 {
		t.Errorf("no flow from the gateway's new port 7:\n%s", strings.Join(ta.sw.flows(), "\n"))
	}
	if f := append(ta.flowsNaming("in_port=1 "), ta.flowsNaming("output:1")...); len(f) != 0 {
		t.Errorf("flows still name the gateway's old port 1: %v", f)
	}
}
