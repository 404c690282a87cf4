package ofproto

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// fakeClock is a settable Config.Now.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// newTestPipeline returns a pipeline with ports 1..n up and a fake clock.
func newTestPipeline(t testing.TB, n int) (*Pipeline, *fakeClock) {
	t.Helper()
	c := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	p := New(Config{NumTables: 8, Now: c.now})
	var ports []Port
	for i := 1; i <= n; i++ {
		ports = append(ports, Port{No: uint32(i), Name: "p" + string(rune('0'+i))})
	}
	p.SetPorts(ports)
	return p, c
}

// flowMod parses an ovs-ofctl flow and sets the command.
func flowMod(t testing.TB, cmd uint8, s string) *openflow.FlowMod {
	t.Helper()
	fm, err := openflow.ParseFlow(s)
	if err != nil {
		t.Fatalf("ParseFlow(%q): %v", s, err)
	}
	fm.Command = cmd
	return fm
}

// mustAdd installs flows.
func mustAdd(t testing.TB, p *Pipeline, flows ...string) {
	t.Helper()
	for _, s := range flows {
		if _, err := p.FlowMod(flowMod(t, openflow.FlowAdd, s)); err != nil {
			t.Fatalf("add %q: %v", s, err)
		}
	}
}

// wantErr checks err is an *openflow.Error of type/code.
func wantErr(t testing.TB, err error, typ openflow.ErrorType, code uint16) {
	t.Helper()
	var oe *openflow.Error
	if !errors.As(err, &oe) {
		t.Fatalf("error %v, want *openflow.Error %d/%d", err, typ, code)
	}
	if oe.Type != typ || oe.Code != code {
		t.Fatalf("error %v (%d/%d), want %d/%d", err, oe.Type, oe.Code, typ, code)
	}
}

func mac(s string) [6]byte {
	var m [6]byte
	hw := mustMAC(s)
	copy(m[:], hw)
	return m
}

func mustMAC(s string) []byte {
	b := make([]byte, 6)
	var x [6]int
	n := 0
	for i := 0; i < len(s) && n < 6; i += 3 {
		v := 0
		for _, c := range s[i : i+2] {
			v <<= 4
			switch {
			case c >= '0' && c <= '9':
				v |= int(c - '0')
			case c >= 'a' && c <= 'f':
				v |= int(c-'a') + 10
			}
		}
		x[n] = v
		n++
	}
	for i := range b {
		b[i] = byte(x[i])
	}
	return b
}

// tcpKey builds an IPv4/TCP packet key.
func tcpKey(in uint32, src, dst string, sport, dport uint16) flow.Key {
	k := flow.Key{InPort: in, EthType: 0x0800, NwProto: 6, NwTTL: 64, TpSrc: sport, TpDst: dport,
		EthSrc: mac("00:00:00:00:00:01"), EthDst: mac("00:00:00:00:00:02")}
	k.SetIPSrc(netip.MustParseAddr(src))
	k.SetIPDst(netip.MustParseAddr(dst))
	return k
}

// translate runs key through p and fails the test on error.
func translate(t testing.TB, p *Pipeline, k flow.Key) *Translation {
	t.Helper()
	tr, err := p.Translate(k, TranslateOptions{Trace: true})
	if err != nil {
		t.Fatalf("Translate: %v", err)
	}
	return tr
}

func actions(tr *Translation) string { return flow.FormatActions(tr.Actions) }

// wantActions installs flows in a new pipeline and checks what the packet
// with key translates to.
func wantActions(t *testing.T, flows []string, key flow.Key, want string) {
	t.Helper()
	p, _ := newTestPipeline(t, 3)
	mustAdd(t, p, flows...)
	tr := translate(t, p, key)
	if got := actions(tr); got != want {
		t.Fatalf("actions %s, want %s\ntrace:\n%s", got, want, FormatTrace(tr.Trace))
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
