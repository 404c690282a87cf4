package openflow

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// fakeSwitch is the switch side of an OpenFlow 1.3 channel, just enough
// for ovs-ofctl: it says HELLO, answers FEATURES, ECHO, BARRIER and
// GET_CONFIG, answers MULTIPART requests through reply, and records every
// message the peer sends.
type fakeSwitch struct {
	t    *testing.T
	path string
	ln   net.Listener
	// reply returns the messages to send for a request; nil means the
	// defaults above. Replies get the request's xid.
	reply func(m Message) []Message

	mu     sync.Mutex
	config SwitchConfig
	got    [][]byte
	errs   []error
	wg     sync.WaitGroup
}

func newFakeSwitch(t *testing.T, reply func(Message) []Message) *fakeSwitch {
	t.Helper()
	path := filepath.Join(t.TempDir(), "of.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeSwitch{t: t, path: path, ln: ln, reply: reply, config: SwitchConfig{MissSendLen: 128}}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

func (s *fakeSwitch) target() string { return "unix:" + s.path }

func (s *fakeSwitch) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			if err := s.serve(c); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.mu.Lock()
				s.errs = append(s.errs, err)
				s.mu.Unlock()
			}
		}()
	}
}

func (s *fakeSwitch) serve(c net.Conn) error {
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if err := WriteMessage(c, NewHello(1, Version)); err != nil {
		return err
	}
	r := NewReader(c)
	for {
		raw, err := r.ReadRaw()
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.got = append(s.got, raw)
		s.mu.Unlock()
		m, err := Unmarshal(raw)
		if err != nil {
			// Tell the peer, as a switch would, and keep going.
			if werr := WriteMessage(c, ErrorReply(err, raw)); werr != nil {
				return werr
			}
			return err
		}
		if sc, ok := m.(*SetConfig); ok {
			s.mu.Lock()
			s.config = sc.SwitchConfig
			s.mu.Unlock()
		}
		if _, ok := m.(*GetConfigRequest); ok {
			s.mu.Lock()
			cfg := s.config
			s.mu.Unlock()
			if err := WriteMessage(c, &GetConfigReply{MsgHeader: MsgHeader{Xid: m.Hdr().Xid}, SwitchConfig: cfg}); err != nil {
				return err
			}
			continue
		}
		var out []Message
		if s.reply != nil {
			out = s.reply(m)
		}
		if out == nil {
			out = defaultReplies(m)
		}
		for _, o := range out {
			o.Hdr().Xid = m.Hdr().Xid
			if err := WriteMessage(c, o); err != nil {
				return err
			}
		}
	}
}

// defaultReplies answers what ovs-ofctl waits for.
func defaultReplies(m Message) []Message {
	switch m := m.(type) {
	case *FeaturesRequest:
		return []Message{&FeaturesReply{DatapathID: 0x0000aabbccddeeff, NBuffers: 0, NTables: 254,
			Capabilities: CapFlowStats | CapTableStats | CapPortStats | CapGroupStats}}
	case *EchoRequest:
		return []Message{m.Reply()}
	case *BarrierRequest:
		return []Message{&BarrierReply{}}
	case *MultipartRequest:
		return []Message{defaultMultipart(m)}
	}
	return nil
}

var testPorts = []Port{
	{PortNo: 1, HWAddr: mustMAC("02:00:00:00:00:01"), Name: "p1", Curr: PortFeature10GbFD | PortFeatureFiber,
		CurrSpeed: 10000000, MaxSpeed: 10000000},
	{PortNo: 2, HWAddr: mustMAC("02:00:00:00:00:02"), Name: "p2", Config: PortConfigPortDown,
		State: PortStateLinkDown, CurrSpeed: 0, MaxSpeed: 0},
}

func mustMAC(s string) net.HardwareAddr {
	hw, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return hw
}

func defaultMultipart(m *MultipartRequest) *MultipartReply {
	rep := &MultipartReply{Type: m.Type}
	switch m.Type {
	case MPDesc:
		rep.Body = &DescReply{MfrDesc: "nagare", HWDesc: "fake", SWDesc: "test", SerialNum: "0", DPDesc: "fake switch"}
	case MPPortDesc:
		rep.Body = &PortDescReply{Ports: testPorts}
	case MPPortStats:
		rep.Body = &PortStatsReply{}
	case MPTable:
		rep.Body = &TableStatsReply{}
	case MPFlow:
		rep.Body = &FlowStatsReply{}
	case MPAggregate:
		rep.Body = &AggregateStatsReply{}
	case MPGroup:
		rep.Body = &GroupStatsReply{}
	case MPGroupDesc:
		rep.Body = &GroupDescReply{}
	case MPGroupFeatures:
		rep.Body = &GroupFeaturesReply{}
	case MPMeterFeatures:
		rep.Body = &MeterFeaturesReply{}
	case MPTableFeatures:
		rep.Body = &TableFeaturesBody{Reply: true, Tables: []TableFeatures{testTableFeatures()}}
	default:
		rep.Body = &RawBody{Type: m.Type}
	}
	return rep
}

// received returns the messages recorded so far.
func (s *fakeSwitch) received() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte{}, s.got...)
}

// ovsOfctl runs ovs-ofctl -O OpenFlow13 <args...> and returns its stdout.
// The test is skipped when ovs-ofctl is not installed.
func ovsOfctl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin, err := exec.LookPath("ovs-ofctl")
	if err != nil {
		t.Skip("ovs-ofctl not installed (Debian package openvswitch-common)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"-O", "OpenFlow13"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if err != nil {
		return stdout.String(), errors.New(err.Error() + ": " + stderr.String())
	}
	return stdout.String(), nil
}
