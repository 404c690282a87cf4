// Command nagare-agent is nagare's node agent: one per node, beside the
// node's nagare-switch. It serves nagare-cni (pod ADD/DEL/CHECK/GC/STATUS),
// keeps the node's gateway, tunnel and masquerade, and programs the switch.
//
//	nagare-agent --node-name NODE [--cluster-file FILE] [--netns NAME|PATH] ...
//	nagare-agent --kubernetes [--kubeconfig FILE] --node-name NODE --config FILE ...
//	nagare-agent --mode dpu --dpu-netns NS --dpu-switch ssl:IP:PORT ...   # the switch in a DPU domain
//	nagare-agent install-cni --bin-dir /opt/cni/bin --conf-dir /etc/cni/net.d
//	nagare-agent cleanup [--node-name NODE] [--netns ...] [--keep-cni]   # remove the node's devices, tables, IPAM database, nagare-cni and its conflist
//
// Without Kubernetes the nodes and Services come from a cluster file (the
// embedded default unless --cluster-file names one); with --kubernetes the
// shared settings come from --config (the same YAML without nodes and
// Services, plus kubeAPIServerOverride) and the nodes, Services and
// EndpointSlices from the API server.
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
	"strings"
	"syscall"
	"time"

	"github.com/nagare-net/nagare/pkg/agent"
	"github.com/nagare-net/nagare/pkg/agent/cniserver"
	"github.com/nagare-net/nagare/pkg/agent/config"
	"github.com/nagare-net/nagare/pkg/agent/inns"
	"github.com/nagare-net/nagare/pkg/agent/k8s"
	"github.com/nagare-net/nagare/pkg/agent/nodenet"
	"github.com/nagare-net/nagare/pkg/agent/nodeport"
	"github.com/nagare-net/nagare/pkg/agent/snat"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "nagare-agent:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "install-cni":
			return installCNI(args[1:])
		case "cleanup":
			return cleanup(args[1:])
		}
	}
	fs := flag.NewFlagSet("nagare-agent", flag.ContinueOnError)
	var (
		cfg         agent.Config
		clusterFile string
		kube        bool
		kubeconfig  string
		netnsName   string
		switchSock  string
		metricsAddr string
		logLevel    string
		dpuNetns    string
	)
	fs.StringVar(&cfg.NodeName, "node-name", defaultNodeName(), "this node's name (default: $NODE_NAME, else the host name)")
	fs.StringVar(&clusterFile, "cluster-file", "", "cluster file (YAML: vni, mtu, clusterCIDR, externalInterface, nodes, services); default: the embedded one")
	fs.StringVar(&clusterFile, "config", "", "same as --cluster-file (under Kubernetes: the settings, without nodes and services)")
	fs.BoolVar(&kube, "kubernetes", false, "take nodes, pods, Services and EndpointSlices from the Kubernetes API (in-cluster, or --kubeconfig; kubeAPIServerOverride in --config comes first)")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig for --kubernetes outside a pod")
	fs.StringVar(&netnsName, "netns", "", "the node's network namespace (a name under /var/run/netns, or a path); default: the agent's own")
	fs.StringVar(&switchSock, "switch", "unix:"+agent.DefaultSwitchSocket, "the node switch's management socket")
	fs.StringVar(&cfg.CNISocket, "cni-socket", cniserver.DefaultSocket, "where nagare-cni reaches the agent (mode 0600)")
	fs.StringVar(&cfg.AgentSocket, "agent-socket", agent.DefaultAgentSocket, "status and metrics for nagarectl agent (mode 0600)")
	fs.StringVar(&cfg.StateDir, "state-dir", agent.DefaultStateDir, "IPAM database directory")
	fs.StringVar(&cfg.Gateway, "gateway", nodenet.DefaultGateway, "gateway device name")
	fs.StringVar(&cfg.Tunnel, "tunnel", nodenet.DefaultTunnel, "VXLAN device name")
	fs.StringVar(&metricsAddr, "metrics-addr", "", "also serve /metrics on this TCP address (e.g. 127.0.0.1:9475); the agent socket always serves it")
	fs.DurationVar(&cfg.GCInterval, "gc-interval", time.Minute, "period of the check for leaked allocations")
	fs.DurationVar(&cfg.GCGrace, "gc-grace", 2*time.Minute, "allocations younger than this are never collected")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&cfg.Mode, "mode", agent.ModeHost, "host: the switch runs beside the agent (--switch); dpu: in a DPU domain, over its control network (docs/dpu.md)")
	fs.StringVar(&dpuNetns, "dpu-netns", "", "DPU mode: the DPU domain's network namespace (name or path)")
	fs.StringVar(&cfg.DPU.Switch, "dpu-switch", "", "DPU mode: the DPU switch on the control network, ssl:IP:PORT")
	fs.StringVar(&cfg.DPU.PKIDir, "pki-dir", "", "DPU mode: control-network certificates (default <state-dir>/pki; made on first start)")
	fs.StringVar(&cfg.DPU.CPUs, "dpu-cpus", "", "DPU mode: the DPU domain's CPUs (e.g. 1 or 2-3): what crosses into it is processed there, what comes back on the other CPUs (RPS); default: no steering")
	fs.StringVar(&cfg.DPU.PinDir, "bpffs", "", "DPU mode: BPF filesystem directory for the VF maps (default /sys/fs/bpf/nagare/agent-<node>)")
	fs.BoolVar(&cfg.DPU.DirectForward, "direct-forward", true, "DPU mode: forward intra-node pod traffic at the VF, never hairpinning through the DPU")
	fs.DurationVar(&cfg.DPU.LeaseTimeout, "dpu-lease", 2*time.Second, "DPU mode: the DPU is down when it has not answered for this long")
	fs.StringVar(&inns.SysctlRoot, "proc-sys", inns.SysctlRoot, "where the kernel's sysctls are (a container that is not privileged mounts the host's /proc/sys/net under /host/proc/sys and passes /host/proc/sys)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	sock, ok := strings.CutPrefix(switchSock, "unix:")
	if !ok {
		return fmt.Errorf("--switch %s: want unix:PATH", switchSock)
	}
	cfg.SwitchSocket = sock
	cfg.NetNS = netnsPath(netnsName)
	cfg.DPU.Netns = netnsPath(dpuNetns)
	if cfg.DPU.LeaseTimeout > 0 {
		cfg.DPU.LeaseInterval = cfg.DPU.LeaseTimeout / 4
	}
	c, err := config.Load(clusterFile)
	if err != nil {
		return err
	}
	cfg.Cluster = c
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if kube {
		client, err := k8s.ClientFromFlags(kubeconfig, kubeconfig == "", c.KubeAPIServerOverride)
		if err != nil {
			return err
		}
		cfg.Kube = k8s.NewSource(client, cfg.NodeName, cfg.Logger)
	}
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	if metricsAddr != "" {
		go func() {
			if err := a.ServeMetrics(ctx, metricsAddr); err != nil {
				cfg.Logger.Error("metrics listener", "addr", metricsAddr, "err", err)
			}
		}()
	}
	return a.Run(ctx)
}

func defaultNodeName() string {
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n
	}
	h, _ := os.Hostname()
	return h
}

func netnsPath(name string) string {
	if name == "" || strings.Contains(name, "/") {
		return name
	}
	return filepath.Join("/var/run/netns", name)
}

// installCNI drops nagare-cni (from beside this binary) and the conflist
// on the node: the DaemonSet's init container.
func installCNI(args []string) error {
	fs := flag.NewFlagSet("install-cni", flag.ContinueOnError)
	binDir := fs.String("bin-dir", "/opt/cni/bin", "where the container runtime looks for CNI plugins")
	confDir := fs.String("conf-dir", "/etc/cni/net.d", "where the container runtime reads network configurations")
	sock := fs.String("cni-socket", cniserver.DefaultSocket, "the agent's CNI socket, written into the conflist")
	src := fs.String("plugin", "", "the nagare-cni binary to install (default: beside this program)")
	portmap := fs.String("portmap", "", "the CNI portmap plugin, chained for hostPort (default: beside this program, if there; \"none\": not chained)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if *src == "" {
		*src = filepath.Join(filepath.Dir(exe), "nagare-cni")
	}
	plugins := []string{*src}
	if *portmap == "" {
		if p := filepath.Join(filepath.Dir(exe), "portmap"); fileExists(p) {
			*portmap = p
		}
	}
	if *portmap != "" && *portmap != "none" {
		plugins = append(plugins, *portmap)
	}
	if err := cniserver.Install(plugins, *binDir, *confDir, cniserver.DefaultConflist(*sock, len(plugins) > 1)); err != nil {
		return err
	}
	fmt.Printf("installed %s into %s and the nagare conflist into %s\n", strings.Join(plugins, ", "), *binDir, *confDir)
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// cleanup removes what the agent made on the node: gateway, tunnel
// device and its PMTU bridge, the masquerade and NodePort tables, and with
// --node-name the IPAM database; the conflist and nagare-cni too unless
// --keep-cni. Pods attached are left to their runtime's DEL; what stays
// is said in deploy/README.md (ip_forward, the portmap plugin).
func cleanup(args []string) error {
	fs := flag.NewFlagSet("cleanup", flag.ContinueOnError)
	netnsName := fs.String("netns", "", "the node's network namespace")
	gw := fs.String("gateway", nodenet.DefaultGateway, "gateway device name")
	tun := fs.String("tunnel", nodenet.DefaultTunnel, "VXLAN device name")
	node := fs.String("node-name", defaultNodeName(), "this node's name: its IPAM database <state-dir>/ipam-<node>.db is removed")
	stateDir := fs.String("state-dir", agent.DefaultStateDir, "the agent's state directory")
	binDir := fs.String("bin-dir", "/opt/cni/bin", "where install-cni put nagare-cni")
	confDir := fs.String("conf-dir", "/etc/cni/net.d", "where install-cni put "+cniserver.ConflistName)
	keepCNI := fs.Bool("keep-cni", false, "leave nagare-cni and the conflist in place")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("cleanup: unexpected arguments %q", fs.Args())
	}
	n, err := nodenet.Open(nodenet.Config{Netns: netnsPath(*netnsName), Gateway: *gw, Tunnel: *tun})
	if err != nil {
		return err
	}
	defer n.Close()
	errs := []error{n.Remove(), snat.Remove(netnsPath(*netnsName)), nodeport.Remove(netnsPath(*netnsName))}
	files := []string{}
	if *node != "" {
		files = append(files, filepath.Join(*stateDir, "ipam-"+*node+".db"))
	}
	if !*keepCNI {
		// The conflist first: a runtime that still finds it would call a
		// plugin that is gone.
		files = append(files, filepath.Join(*confDir, cniserver.ConflistName), filepath.Join(*binDir, "nagare-cni"))
	}
	for _, f := range files {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		} else if err == nil {
			fmt.Println("removed", f)
		}
	}
	return errors.Join(errs...)
}
