package lab

import (
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
)

// toolPackages names the Debian package that provides each tool the lab
// runs, for the "install it with" messages.
var toolPackages = map[string]string{
	"ip":               "iproute2",
	"ethtool":          "ethtool",
	"ping":             "iputils-ping",
	"taskset":          "util-linux",
	"setpriv":          "util-linux",
	"sysctl":           "procps",
	"sockperf":         "sockperf",
	"iperf3":           "iperf3",
	"stress-ng":        "stress-ng",
	"ovs-vswitchd":     "openvswitch-switch",
	"ovsdb-server":     "openvswitch-switch",
	"ovsdb-tool":       "openvswitch-common",
	"ovs-vsctl":        "openvswitch-switch",
	"ovs-appctl":       "openvswitch-common",
	"wrk":              "wrk",
	"nginx":            "nginx-light",
	"haproxy":          "haproxy",
	"etcd":             "etcd-server",
	"nft":              "nftables",
	"iptables-restore": "iptables",
}

// geteuid is os.Geteuid, replaceable in tests.
var geteuid = os.Geteuid

// MissingTools returns, for each tool not in PATH, "tool (Debian package
// pkg)"; nil when all are there.
func MissingTools(tools ...string) []string {
	var missing []string
	seen := map[string]bool{}
	for _, t := range tools {
		if seen[t] {
			continue
		}
		seen[t] = true
		if _, err := exec.LookPath(t); err != nil {
			pkg := toolPackages[t]
			if pkg == "" {
				pkg = "?"
			}
			missing = append(missing, fmt.Sprintf("%s (Debian package %s)", t, pkg))
		}
	}
	sort.Strings(missing)
	return missing
}

// requiredTools lists the tools a scenario needs whatever the data plane.
func (s *Scenario) requiredTools() []string {
	tools := []string{"ip", "ethtool", "ping", "taskset", "sysctl"}
	for _, m := range s.Measurements {
		switch m.Kind {
		case KindRTT:
			tools = append(tools, "sockperf")
		case KindConnRate:
			tools = append(tools, "wrk", "nginx")
		case KindServiceScale:
		case KindBookinfo:
			// wrk, the sidecars' nginx (as their own user) and capture rules.
			tools = append(tools, "wrk", "nginx", "nft", "setpriv")
			for _, p := range m.Proxies {
				if p == "node" || p == "dpu" { // HAProxy, behind nagare's transparent redirection (mesh_node.go)
					tools = append(tools, "haproxy")
					break
				}
			}
		default:
			tools = append(tools, "iperf3")
		}
	}
	for _, l := range s.Loads {
		if l.CPU != nil || l.CPUPods != nil {
			tools = append(tools, "stress-ng")
		}
		if l.Net != nil {
			tools = append(tools, "iperf3")
		}
	}
	return tools
}

// CheckHost returns an error unless the lab can run scenario s here: root,
// network namespaces, every needed tool, enough CPUs.
func CheckHost(s *Scenario) error {
	if geteuid() != 0 {
		return fmt.Errorf("the lab needs root (it creates network namespaces); run it with sudo")
	}
	if missing := MissingTools(s.requiredTools()...); len(missing) > 0 {
		return fmt.Errorf("missing tools: %s; install with apt-get install %s (or make deps)",
			strings.Join(missing, ", "), strings.Join(packagesOf(missing), " "))
	}
	n := numCPU()
	maxCPU := max(s.CPUs.Client, s.CPUs.Server)
	for _, l := range s.Loads {
		if l.CPU != nil {
			for _, c := range l.CPU.CPUs {
				maxCPU = max(maxCPU, c)
			}
		}
	}
	if maxCPU >= n {
		return fmt.Errorf("scenario %s uses CPU %d but this host has %d CPUs", s.Name, maxCPU, n)
	}
	return nil
}

func packagesOf(missing []string) []string {
	set := map[string]bool{}
	for _, m := range missing {
		if i := strings.Index(m, "package "); i >= 0 {
			set[strings.TrimSuffix(m[i+len("package "):], ")")] = true
		}
	}
	var out []string
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// numCPU counts the CPUs the kernel has online (not this process's affinity).
func numCPU() int {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 1
	}
	ps, err := ParseProcStat(string(data))
	if err != nil || len(ps.PerCPU) == 0 {
		return 1
	}
	return len(ps.PerCPU)
}
