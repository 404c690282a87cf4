package agent

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/nagare-net/nagare/pkg/agent/podnet"
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
