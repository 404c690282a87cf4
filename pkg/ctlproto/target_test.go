package ctlproto

import "testing"

func TestParseTarget(t *testing.T) {
	good := map[string]Target{
		"punix:/run/x.mgmt":  {Passive: true, Network: "unix", Address: "/run/x.mgmt"},
		"ptcp:6653":          {Passive: true, Network: "tcp", Address: "127.0.0.1:6653"},
		"ptcp:6633:0.0.0.0":  {Passive: true, Network: "tcp", Address: "0.0.0.0:6633"},
		"ptcp:":              {Passive: true, Network: "tcp", Address: "127.0.0.1:6653"},
		"tcp:10.0.0.1:6633":  {Network: "tcp", Address: "10.0.0.1:6633"},
		"tcp:10.0.0.1":       {Network: "tcp", Address: "10.0.0.1:6653"},
		"tcp:[::1]:6653":     {Network: "tcp", Address: "[::1]:6653"},
		"unix:/tmp/ctl.sock": {Network: "unix", Address: "/tmp/ctl.sock"},
		// The DPU's control network (docs/dpu.md): mutual TLS, an
		// explicit address.
		"pssl:6653:169.254.100.2": {Passive: true, Network: "tcp", Address: "169.254.100.2:6653", TLS: true},
		"ssl:169.254.100.2:6653":  {Network: "tcp", Address: "169.254.100.2:6653", TLS: true},
	}
	for in, want := range good {
		got, err := ParseTarget(in)
		if err != nil || got != want {
			t.Errorf("%s: got %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "punix:", "ptcp:99999", "ptcp:1:nothost", "tcp:host.example:1", "tcp:1.2.3.4:0", "foo",
		"pssl:6653", "pssl:6653:0.0.0.0", "pssl:6653:::", "pssl:0:10.0.0.1", "pssl:6653:host.example", "ssl:1.2.3.4:0"} {
		if _, err := ParseTarget(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if s := (Target{Passive: true, Network: "tcp", Address: "127.0.0.1:6653"}).String(); s != "ptcp:6653:127.0.0.1" {
		t.Errorf("String %s", s)
	}
	for _, in := range []string{"pssl:6653:169.254.100.2", "ssl:169.254.100.2:6653"} {
		if tg, _ := ParseTarget(in); tg.String() != in {
			t.Errorf("String of %s: %s", in, tg.String())
		}
	}
}
