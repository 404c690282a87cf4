package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/agent/cniserver"
	"github.com/nagare-net/nagare/pkg/agent/config"
	"github.com/nagare-net/nagare/pkg/agent/ipam"
	"github.com/nagare-net/nagare/pkg/agent/nodenet"
	"github.com/nagare-net/nagare/pkg/agent/pipeline"
	"github.com/nagare-net/nagare/pkg/agent/podnet"
	"github.com/nagare-net/nagare/pkg/ctlproto"
	"github.com/nagare-net/nagare/pkg/ofproto"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// The agent without root: its node, switch and IPAM database are fakes
// (hostops.go's interfaces) and the switch's OpenFlow side is a real
// ofproto pipeline behind a net.Pipe, so what the agent programs can be
// read back as flows.

// fakeSwitch is a switch's control protocol (ports) and OpenFlow side.
type fakeSwitch struct {
	mu     sync.Mutex
	ports  map[string]ctlproto.PortInfo
	next   uint32
	of     *ofproto.Pipeline
	before func(req ctlproto.Request) // called before each control request (outside mu)
}

func newFakeSwitch() *fakeSwitch {
	return &fakeSwitch{ports: map[string]ctlproto.PortInfo{}, next: 1, of: ofproto.New(ofproto.Config{})}
}

func (s *fakeSwitch) control(_ context.Context, req ctlproto.Request) (*ctlproto.Response, error) {
	if s.before != nil {
		s.before(req)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch req.Cmd {
	case "list-ports":
		var ps []ctlproto.PortInfo
		for _, p := range s.ports {
			ps = append(ps, p)
		}
		b, _ := json.Marshal(ps)
		return &ctlproto.Response{OK: true, Data: b}, nil
	case "port-add":
		name := req.Name
		if req.Remote != "" {
			name = req.Name + "-" + req.Remote
		}
		if _, ok := s.ports[name]; ok {
			return nil, fmt.Errorf("switch: port %s exists", name)
		}
		no := req.OFPort
		if no == 0 {
			no = s.next
		}
		for _, p := range s.ports {
			if p.OFPort == no {
				return nil, fmt.Errorf("switch: port number %d taken", no)
			}
		}
		s.next = max(s.next, no) + 1
		s.ports[name] = ctlproto.PortInfo{OFPort: no, Name: name, Kind: req.Kind, Remote: req.Remote, Local: req.Local}
		s.syncPortsLocked()
		return &ctlproto.Response{OK: true, Data: json.RawMessage(fmt.Sprintf(`{"ofport":%d}`, no))}, nil
	case "port-del":
		for name, p := range s.ports {
			if name == req.Name || strconv.Itoa(int(p.OFPort)) == req.Name {
				delete(s.ports, name)
				s.syncPortsLocked()
				return &ctlproto.Response{OK: true}, nil
			}
		}
		return nil, fmt.Errorf("switch: no port %s", req.Name)
	}
	return nil, fmt.Errorf("fake switch: %s not implemented", req.Cmd)
}

func (s *fakeSwitch) syncPortsLocked() {
	var ps []ofproto.Port
	for _, p := range s.ports {
		ps = append(ps, ofproto.Port{No: p.OFPort, Name: p.Name})
	}
	s.of.SetPorts(ps)
}

// restart is the switch restarting: ports renumbered from first on, no
// flows.
func (s *fakeSwitch) restart(first uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ports = map[string]ctlproto.PortInfo{}
	s.next = first
	s.of = ofproto.New(ofproto.Config{})
}

func (s *fakeSwitch) port(name string) (uint32, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.ports[name]
	return p.OFPort, ok
}

// connect is an OpenFlow connection to the switch's current pipeline.
func (s *fakeSwitch) connect(t testing.TB) *pipeline.Conn {
	t.Helper()
	s.mu.Lock()
	of := s.of
	s.mu.Unlock()
	a, b := net.Pipe()
	go serveOpenFlow(of, b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pipeline.Open(ctx, a, "fake")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// flows is the switch's flow table, one line per flow.
func (s *fakeSwitch) flows() []string {
	s.mu.Lock()
	of := s.of
	s.mu.Unlock()
	var out []string
	for _, f := range of.FlowStats(&openflow.FlowStatsRequest{TableID: openflow.TableAll, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny}) {
		out = append(out, fmt.Sprintf("table=%d priority=%d %v actions=%v", f.TableID, f.Priority, f.Match, f.Instructions))
	}
	return out
}

func serveOpenFlow(of *ofproto.Pipeline, nc net.Conn) {
	defer nc.Close()
	r := openflow.NewReader(nc)
	var wmu sync.Mutex
	send := func(m openflow.Message) {
		wmu.Lock()
		defer wmu.Unlock()
		_ = openflow.WriteMessage(nc, m)
	}
	for {
		m, raw, err := r.ReadMessage()
		if err != nil {
			return
		}
		xid := m.Hdr().Xid
		fail := func(err error) {
			e := openflow.ErrorReply(err, raw)
			e.Xid = xid
			send(e)
		}
		switch m := m.(type) {
		case *openflow.Hello:
			send(openflow.NewHello(xid, 0x04))
		case *openflow.FeaturesRequest:
			send(&openflow.FeaturesReply{MsgHeader: openflow.MsgHeader{Xid: xid}, DatapathID: 1, NTables: 254})
		case *openflow.EchoRequest:
			send(m.Reply())
		case *openflow.BarrierRequest:
			send(&openflow.BarrierReply{MsgHeader: openflow.MsgHeader{Xid: xid}})
		case *openflow.FlowMod:
			if _, err := of.FlowMod(m); err != nil {
				fail(err)
			}
		case *openflow.GroupMod:
			if err := of.GroupMod(m); err != nil {
				fail(err)
			}
		case *openflow.MultipartRequest:
			var body openflow.MultipartBody
			switch m.Type {
			case openflow.MPFlow:
				body = &openflow.FlowStatsReply{Stats: of.FlowStats(m.Body.(*openflow.FlowStatsRequest))}
			case openflow.MPGroupDesc:
				body = &openflow.GroupDescReply{Groups: of.GroupDesc()}
			}
			send(&openflow.MultipartReply{MsgHeader: openflow.MsgHeader{Xid: xid}, Type: m.Type, Body: body})
		}
	}
}

// fakePodNet is the node's pod devices: host ends by name.
type fakePodNet struct {
	mu    sync.Mutex
	hosts map[string]podnet.Pod
}

func (f *fakePodNet) Setup(p podnet.Pod) (podnet.Attached, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hosts == nil {
		f.hosts = map[string]podnet.Pod{}
	}
	f.hosts[p.Host] = p
	return podnet.Attached{MAC: podnet.MACFor(p.Addr.Addr())}, nil
}

func (f *fakePodNet) Teardown(host string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.hosts, host)
	return nil
}

func (f *fakePodNet) HostExists(host string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.hosts[host]
	return ok, nil
}

func (f *fakePodNet) Check(p podnet.Pod) error {
	if ok, _ := f.HostExists(p.Host); !ok {
		return fmt.Errorf("no host end %s", p.Host)
	}
	return nil
}

func (f *fakePodNet) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.hosts)
}

// fakeNodeNet is the node's routes to remote pod subnets.
type fakeNodeNet struct {
	nodeNetwork // the rest is not called by the code under test
	mu          sync.Mutex
	routes      map[netip.Prefix]bool
}

func (f *fakeNodeNet) EnsureRemote(r nodenet.Remote, _ net.HardwareAddr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.routes == nil {
		f.routes = map[netip.Prefix]bool{}
	}
	f.routes[r.PodCIDR] = true
	return nil
}

func (f *fakeNodeNet) DelRemote(r nodenet.Remote) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.routes, r.PodCIDR)
	return nil
}

func (f *fakeNodeNet) has(p netip.Prefix) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.routes[p]
}

// testAgent is node1 of the embedded cluster file with fakes all round,
// connected and synced to sw.
type testAgent struct {
	*Agent
	sw     *fakeSwitch
	podNet *fakePodNet
	nodes  *fakeNodeNet
	store  *ipam.Store
}

func newTestAgent(t *testing.T, mutate func(*config.Cluster)) *testAgent {
	t.Helper()
	c := config.Default()
	if mutate != nil {
		mutate(c)
	}
	a, err := New(Config{NodeName: "node1", Cluster: c, StateDir: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	a.node, _ = c.Node("node1")
	store, err := ipam.Open(filepath.Join(a.cfg.StateDir, "ipam.db"), a.node.PodCIDR, a.node.Gateway())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ta := &testAgent{Agent: a, sw: newFakeSwitch(), podNet: &fakePodNet{}, nodes: &fakeNodeNet{}, store: store}
	ta.wire()
	ta.reconnect(t)
	return ta
}

func (ta *testAgent) wire() {
	a := ta.Agent
	a.ipam, a.podNet, a.net, a.control = ta.store, ta.podNet, ta.nodes, ta.sw.control
	a.gw = nodenet.Gateway{PortName: "nagare0", MAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}}
}

// restartAgent is a new agent on the same node, switch and IPAM
// database (the agent's process restarted): it reads its pods back and
// syncs, as Run does.
func (ta *testAgent) restartAgent(t *testing.T) *testAgent {
	t.Helper()
	a, err := New(ta.cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.node = ta.node
	nt := &testAgent{Agent: a, sw: ta.sw, podNet: ta.podNet, nodes: ta.nodes, store: ta.store}
	nt.wire()
	if err := a.loadPods(); err != nil {
		t.Fatal(err)
	}
	nt.reconnect(t)
	return nt
}

// reconnect is the agent's side of a (re)connection: ports, then Sync.
func (ta *testAgent) reconnect(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ta.syncSwitch(ctx, ta.sw.connect(t)); err != nil {
		t.Fatalf("sync: %v", err)
	}
}

// addReq is a CNI ADD (or DEL) of pod ns/name with this container id.
func addReq(id, pod string) *cniserver.Request {
	ns, name, _ := strings.Cut(pod, "/")
	return &cniserver.Request{ContainerID: id, IfName: "eth0", Netns: "/proc/self/ns/net",
		Args:   "K8S_POD_NAMESPACE=" + ns + ";K8S_POD_NAME=" + name + ";K8S_POD_UID=uid-" + id,
		Config: []byte(`{"cniVersion":"1.0.0","name":"nagare","type":"nagare-cni"}`)}
}

// flowsNaming is the switch's flows that contain s.
func (ta *testAgent) flowsNaming(s string) []string {
	var out []string
	for _, f := range ta.sw.flows() {
		if strings.Contains(f, s) {
			out = append(out, f)
		}
	}
	return out
}

// TestAddDel: the fakes hold together: an ADD makes the host end, the
// port, the allocation and the pod's flows; its DEL takes them all.
func TestAddDel(t *testing.T) {
	ta := newTestAgent(t, nil)
	ctx := context.Background()
	if _, err := ta.Add(ctx, addReq("c1", "default/a")); err != nil {
		t.Fatal(err)
	}
	host := podnet.HostIfName("c1", "eth0")
	no, ok := ta.sw.port(host)
	if !ok || ta.podNet.count() != 1 {
		t.Fatalf("port %v host ends %d", ok, ta.podNet.count())
	}
	if f := ta.flowsNaming(fmt.Sprintf("in_port=%d", no)); len(f) == 0 {
		t.Fatalf("no flow from the pod's port %d in\n%s", no, strings.Join(ta.sw.flows(), "\n"))
	}
	if used, _ := ta.store.Stats(); used != 1 {
		t.Fatalf("allocations %d", used)
	}
	if err := ta.Del(ctx, addReq("c1", "default/a")); err != nil {
		t.Fatal(err)
	}
	if _, ok := ta.sw.port(host); ok || ta.podNet.count() != 0 {
		t.Fatalf("after DEL: port %v host ends %d", ok, ta.podNet.count())
	}
	if f := ta.flowsNaming(fmt.Sprintf("in_port=%d", no)); len(f) != 0 {
		t.Fatalf("flows left: %v", f)
	}
	if used, _ := ta.store.Stats(); used != 0 {
		t.Fatalf("allocations %d", used)
	}
}

func switchdPortDel(name string) ctlproto.Request {
	return ctlproto.Request{Cmd: "port-del", Name: name}
}
