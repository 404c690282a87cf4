package pipeline

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/nagare-net/nagare/pkg/agent/proxy"
)

// TestServiceCounters: one counter per frontend (with its verdict) and
// per endpoint, read back from the switch's flows by cookie.
func TestServiceCounters(t *testing.T) {
	p, _ := serviceNode(t)
	empty := bigService(nil)
	empty.Ports[0].Internal = proxy.Reject
	if _, err := p.UpdateServices(context.Background(), []*proxy.Service{sameportService(), empty}, nil); err != nil {
		t.Fatal(err)
	}
	scs, err := p.ServiceCounters(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range scs {
		got = append(got, fmt.Sprintf("%s %s fe=%s ep=%s %s", s.Service, s.Protocol, s.Frontend, s.Endpoint, s.Verdict))
	}
	want := []string{
		"default/big TCP fe=10.96.0.20:443 ep= reject",
		"default/multi TCP fe= ep=10.77.1.2:80 ",
		"default/multi UDP fe= ep=10.77.1.2:80 ",
		"default/multi TCP fe=10.96.0.30:80 ep= forward",
		"default/multi UDP fe=10.96.0.30:80 ep= forward",
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			found = found || g == w
		}
		if !found {
			t.Errorf("no counter %q in\n%s", w, strings.Join(got, "\n"))
		}
	}
}
