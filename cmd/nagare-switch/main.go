// Command nagare-switch runs one OpenFlow 1.3 bridge on nagare's eBPF fast
// path. Flags follow Open vSwitch's vocabulary:
//
//	nagare-switch --bridge br0 [--datapath-id HEX] [--listen punix:PATH | ptcp:PORT[:IP] | pssl:PORT:IP]...
//	              [--controller tcp:IP:PORT]... [--fail-mode secure|standalone]
//	              [--run-dir DIR] [--netns NAME|PATH] [--port IFNAME[=N]]...
//
// The management socket <run-dir>/<bridge>.mgmt is always there (--listen
// adds listeners), so
//
//	ovs-ofctl -O OpenFlow13 dump-flows unix:/var/run/nagare/br0.mgmt
//
// works, and nagarectl --switch unix:/var/run/nagare/br0.mgmt ... talks to
// the same socket. Stopping the switch leaves the fast path forwarding with
// the flows it has; starting it again takes them over. One switch runs a
// bridge in a run dir at a time: a second one, or --destroy, is refused
// while it runs (an flock on <run-dir>/<bridge>.lock).
//
//	nagare-switch mount-bpffs [--bpffs DIR]   # a BPF filesystem on /sys/fs/bpf if none, and DIR on it
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nagare-net/nagare/pkg/datapath"
	"github.com/nagare-net/nagare/pkg/steering"
	"github.com/nagare-net/nagare/pkg/switchd"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(s string) error { *m = append(*m, s); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "nagare-switch:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) > 0 && args[0] == "mount-bpffs" {
		return mountBPFFS(args[1:])
	}
	fs := flag.NewFlagSet("nagare-switch", flag.ContinueOnError)
	var (
		cfg         switchd.Config
		listen      multi
		controllers multi
		ports       multi
		steerDevs   multi
		dpid        string
		netnsName   string
		logLevel    string
		destroy     bool
	)
	fs.StringVar(&cfg.Bridge, "bridge", "", "bridge name (required)")
	fs.StringVar(&dpid, "datapath-id", "", "datapath id in hex (default: derived from the bridge name)")
	fs.Var(&listen, "listen", "extra OpenFlow listener: punix:PATH, ptcp:PORT[:IP] or pssl:PORT:IP (mutual TLS, OpenFlow and control, in the --netns namespace: a DPU's control network) (repeatable; punix:<run-dir>/<bridge>.mgmt is always there)")
	fs.Var(&controllers, "controller", "controller to connect to: tcp:IP:PORT (repeatable)")
	fs.StringVar(&cfg.FailMode, "fail-mode", switchd.FailSecure, "without a controller: secure (keep flows, drop misses) or standalone (learning switch)")
	fs.StringVar(&cfg.RunDir, "run-dir", "/var/run/nagare", "directory for the sockets and the bridge's lock")
	fs.StringVar(&netnsName, "netns", "", "network namespace of the ports (a name under /var/run/netns, or a path); use this instead of 'ip netns exec', which hides /sys/fs/bpf")
	fs.StringVar(&cfg.PKIDir, "pki-dir", "", "certificates of the control network for pssl listeners (default <run-dir>/pki; a CA and keys are made on first start)")
	fs.StringVar(&cfg.PinRoot, "bpffs", datapath.DefaultPinRoot, "BPF filesystem directory for the fast path's pins")
	fs.IntVar(&cfg.MaxFlows, "max-flows", datapath.DefaultMaxFlows, "fast-path capacity (another value than the pinned instance's migrates it: docs/switch.md, Upgrades)")
	fs.IntVar(&cfg.FlowLimit, "flow-limit", 200000, "cached flows the slow path installs at most")
	fs.IntVar(&cfg.MACTableSize, "mac-table-size", 0, "NORMAL's MAC learning table holds at most this many entries (default 8192)")
	fs.IntVar(&cfg.MACPerPort, "mac-per-port", 0, "entries one port may own in the MAC table (default a quarter of the table; raise it for an uplink)")
	fs.Func("emc-insert-inv-prob", "one megaflow hit in N enters the exact-match cache (default 100, as Open vSwitch; 1: every hit)", func(v string) error {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n == 0 {
			return fmt.Errorf("want a whole number >= 1, got %q", v)
		}
		cfg.EMCInsertInvProb = uint32(n)
		return nil
	})
	fs.IntVar(&cfg.UpcallRate, "upcall-rate", switchd.DefaultUpcallRate, "misses one port may send to the slow path per second, enforced in the fast path (-1: no limit)")
	fs.IntVar(&cfg.UpcallBurst, "upcall-burst", switchd.DefaultUpcallBurst, "misses one port may send at once (-1: no limit)")
	fs.IntVar(&cfg.PortFlowLimit, "port-flow-limit", 0, "cached flows entering on one port (default half of --flow-limit; -1: no limit)")
	fs.IntVar(&cfg.PortMaskLimit, "port-mask-limit", switchd.DefaultPortMaskLimit, "masks one port's flows may use before it may add no new one (-1: no limit)")
	fs.IntVar(&cfg.PacketInRate, "controller-rate-limit", switchd.DefaultPacketInRate, "PACKET_INs per second to each OpenFlow connection, as Open vSwitch's controller-rate-limit (-1: no limit)")
	fs.IntVar(&cfg.PacketInBurst, "controller-burst-limit", switchd.DefaultPacketInBurst, "PACKET_INs sent at once to each connection (-1: no limit)")
	fs.IntVar(&cfg.ConntrackMax, "conntrack-max", datapath.DefaultConntrackMax, "connections the fast path's connection tracker holds; a full table fails new connections, established ones keep flowing")
	fs.IntVar(&cfg.ConntrackPortMax, "conntrack-port-max", 0, "live connections one ingress port may commit (default a quarter of --conntrack-max; -1: no limit)")
	fs.DurationVar(&cfg.ConntrackTimeouts.TCPEstablished, "conntrack-tcp-established", 0, "idle time after which an established TCP connection is forgotten (default nf_conntrack's 432000s)")
	fs.DurationVar(&cfg.ConntrackTimeouts.UDPReplied, "conntrack-udp-replied", 0, "idle time of a UDP flow that has seen replies (default 120s)")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", 10*time.Second, "remove cached flows unused this long")
	fs.DurationVar(&cfg.RevalidateInterval, "revalidate-interval", 500*time.Millisecond, "period of revalidator rounds")
	fs.Var(&ports, "port", "attach IFNAME at start, optionally as IFNAME=N (repeatable)")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&cfg.DisableMegaflows, "disable-megaflows", false, "cache exact flows only (one per packet key), for flow-setup benchmarks")
	fs.BoolVar(&cfg.KernelTunnel, "kernel-tunnel", false, "leave VXLAN to the tunnel devices (the node's stack and netfilter see tunnel packets) instead of the fast path")
	fs.Var(&steerDevs, "steer-dev", "attach VS-extend receive steering (XDP) to this device (repeatable)")
	fs.Func("steer-threshold", "VS-extend: a CPU at or above this load (percent) is not chosen (default 50)", func(v string) error {
		n, err := strconv.ParseUint(v, 10, 8)
		if err != nil || n == 0 || n > 100 {
			return fmt.Errorf("want 1..100")
		}
		cfg.Steering.Threshold = uint32(n)
		return nil
	})
	fs.Func("steer-fcf", "VS-extend: FCF layout in the ToS byte as IDSHIFT,IDBITS,PRIOBIT (default 1,7,0: id<<1|priority; PRIOBIT 8 = none)", func(v string) error {
		var a, b, c uint8
		if n, err := fmt.Sscanf(v, "%d,%d,%d", &a, &b, &c); err != nil || n != 3 {
			return fmt.Errorf("want IDSHIFT,IDBITS,PRIOBIT")
		}
		cfg.Steering.FCF = steering.FCF{IDShift: a, IDBits: b, PrioBit: c}
		if !cfg.Steering.FCF.Valid() {
			return fmt.Errorf("layout %s does not fit a ToS byte", v)
		}
		return nil
	})
	fs.DurationVar(&cfg.SteerPeriod, "steer-period", time.Second, "VS-extend: CPU load sampling period (/proc/stat)")
	fs.StringVar(&cfg.MetricsAddr, "metrics-addr", "", "serve Prometheus /metrics on this TCP address (e.g. 127.0.0.1:9475)")
	fs.IntVar(&cfg.FastpathCapacity, "fastpath-capacity", 0, "flows the fast path runs at once, emulating a NIC or DPU flow table (0: unlimited); the rest are onloaded, the highest-rate flows hold the fast path")
	fs.Float64Var(&cfg.PlacementHysteresis, "placement-hysteresis", 0.25, "an onloaded flow takes an offloaded one's place only when its rate is this fraction higher ...")
	fs.Float64Var(&cfg.PlacementMinPPS, "placement-min-pps", 100, "... and at least this many packets per second higher")
	fs.Func("onload-path", "how onloaded packets reach the switch: ring (default: BPF ring buffer + sendmmsg, pods keep TSO), auto (AF_XDP where the kernel and device allow it, else the ring: more packets/s, but pods lose TSO while XDP is attached), afxdp (auto, and a kernel without AF_XDP is an error)", func(v string) error {
		p, err := datapath.ParseOnloadPath(v)
		cfg.OnloadPath = p
		return err
	})
	fs.Func("xsk-memory-max", "AF_XDP: memory of all UMEMs together, in MiB (12 MiB per port and receive queue, pinned; 0: no cap; default 256); ports past it keep the ring path", func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("want MiB >= 0")
		}
		datapath.SetXSKMemoryMax(n << 20)
		return nil
	})
	fs.BoolVar(&destroy, "destroy", false, "remove the bridge's fast path (detach ports, delete flows and pins) and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.MACTableSize < 0 || cfg.MACPerPort < 0 || (cfg.MACTableSize > 0 && cfg.MACPerPort > cfg.MACTableSize) {
		return fmt.Errorf("--mac-table-size %d, --mac-per-port %d: want sizes >= 0 (0: default), per port at most the table", cfg.MACTableSize, cfg.MACPerPort)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.Bridge == "" {
		return fmt.Errorf("--bridge is required")
	}
	cfg.SteerDevices = steerDevs
	if dpid != "" {
		v, err := strconv.ParseUint(strings.TrimPrefix(dpid, "0x"), 16, 64)
		if err != nil {
			return fmt.Errorf("--datapath-id %q: %w", dpid, err)
		}
		cfg.DatapathID = v
	}
	for _, l := range listen {
		t, err := switchd.ParseTarget(l)
		if err != nil {
			return err
		}
		if !t.Passive {
			return fmt.Errorf("--listen %s: want punix: or ptcp:", l)
		}
		cfg.Listen = append(cfg.Listen, t)
	}
	for _, c := range controllers {
		t, err := switchd.ParseTarget(c)
		if err != nil {
			return err
		}
		if t.Passive || t.TLS {
			return fmt.Errorf("--controller %s: want tcp:IP:PORT or unix:PATH", c)
		}
		cfg.Controllers = append(cfg.Controllers, t)
	}
	if netnsName != "" {
		cfg.NetNS = netnsName
		if !strings.Contains(netnsName, "/") {
			cfg.NetNS = filepath.Join("/var/run/netns", netnsName)
		}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	sw, err := switchd.New(cfg)
	if destroy && errors.Is(err, switchd.ErrBridgeBusy) {
		return fmt.Errorf("--destroy refused, stop the running switch first: %w", err)
	}
	if err != nil {
		return err
	}
	if destroy {
		return sw.Destroy()
	}
	defer sw.Close()
	for _, p := range ports {
		name, no, _ := strings.Cut(p, "=")
		spec := switchd.PortSpec{Name: name}
		if no != "" {
			n, err := strconv.ParseUint(no, 10, 32)
			if err != nil {
				return fmt.Errorf("--port %s: %w", p, err)
			}
			spec.OFPort = uint32(n)
		}
		if _, err := sw.EnsurePort(spec); err != nil {
			return fmt.Errorf("--port %s: %w", p, err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return sw.Run(ctx)
}

// mountBPFFS mounts a BPF filesystem on /sys/fs/bpf if the node has none
// and makes the pin directory: the DaemonSet's privileged init container
// (mount propagation Bidirectional), so the switch itself needs neither.
func mountBPFFS(args []string) error {
	fs := flag.NewFlagSet("mount-bpffs", flag.ContinueOnError)
	dir := fs.String("bpffs", datapath.DefaultPinRoot, "the switch's pin directory, made on the BPF filesystem")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("mount-bpffs: unexpected arguments %q", fs.Args())
	}
	if err := datapath.EnsureBPFFS(*dir); err != nil {
		return err
	}
	fmt.Println("BPF filesystem ready:", *dir)
	return nil
}
