package k8s

// The two-node cluster: a real Kubernetes v1.33.13 with two kubelets, each
// with its own containerd, in a network namespace of its own (its "node"),
// joined by a Linux bridge in the root namespace, with nagare as the CNI
// (deploy/nagare.yaml, the agent as a DaemonSet on both nodes). Pod traffic
// between the nodes crosses nagare's VXLAN over that bridge. The control
// plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler: a
// real scheduler) runs in the root namespace on the bridge's address.
//
//	root netns:  nk8s-br0 10.250.0.1/24   etcd, kube-apiserver :6443, controller-manager, scheduler
//	              │ nk8s-n1           │ nk8s-n2           (veth, bridge ports)
//	nk8s-node1:  eth0 10.250.0.11      nk8s-node2: eth0 10.250.0.12
//	             containerd, kubelet, nagare DaemonSet pod (hostNetwork), pods (10.78.x.0/24)
//
// Nothing of this cluster may leave the machine: before anything starts, an
// nftables table in the root namespace drops, on the default route's
// interface, everything to or from the cluster's CIDRs (isolate).

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nagare-net/nagare/internal/child"
	"github.com/nagare-net/nagare/pkg/agent"
)

const (
	bridgeName   = "nk8s-br0"
	cpAddr       = "10.250.0.1" // the control plane, on the bridge
	underlayCIDR = "10.250.0.0/24"
	clusterCIDR  = "10.78.0.0/16"
	serviceCIDR  = "10.96.0.0/16"
	kubeDNSIP    = "10.96.0.10"
	isoTable     = "nagare-k8s-isolation"
	coreDNSTag   = "v1.14.3" // scripts/k8s/build.sh COREDNS_VERSION
)

// tnode is one node: a network namespace, a mount namespace held by a
// process (holder), a containerd and a kubelet.
type tnode struct {
	name   string // Kubernetes node name
	netns  string // ip netns name
	ip     string // underlay (InternalIP)
	veth   string // root-namespace end of its link to the bridge
	dir    string
	holder *exec.Cmd
	sock   string // containerd
	cgroup string // the kubelet's cgroupRoot
}

// twoNode is the cluster.
type twoNode struct {
	t        *testing.T
	dir      string
	repoRoot string
	kubecfg  string
	nodes    []*tnode
	cp       []*exec.Cmd // control plane, in start order
	sysctls  map[string]string
	before   hostState
	madeDirs []string // mount points made on the root file system, removed at teardown
	uplink   string   // the default route's interface (isolated), "" if none
	upTime   time.Duration
	opts     twoNodeOptions
}

// twoNodeOptions change what upTwoNodeWith starts: more images in both
// nodes' containerd, and the DaemonSet on another image than nagare:dev.
type twoNodeOptions struct {
	extraImages []string // OCI tars imported beside nagare:dev
	image       string   // the DaemonSet's image ("": deploy/'s nagare:dev)
}

func (c *twoNode) logf(format string, args ...any) {
	c.t.Helper()
	c.t.Logf("[%s] %s", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func (c *twoNode) path(p ...string) string { return filepath.Join(append([]string{c.dir}, p...)...) }

// requireTwoNode skips (or fails, in CI / NAGARE_K8S=1) without the
// binaries and images scripts/k8s/build.sh makes.
func requireTwoNode(t *testing.T) {
	t.Helper()
	requireK8s(t)
	need := []string{"kube-scheduler", "kubectl", "images/registry.k8s.io_pause_3.10.tar",
		"images/registry.k8s.io_e2e-test-images_agnhost_2.53.tar"}
	for _, b := range need {
		if _, err := os.Stat(filepath.Join(k8sDir(), b)); err != nil {
			if os.Getenv("CI") == "true" || os.Getenv("NAGARE_K8S") == "1" {
				t.Fatalf("%s missing in %s (run scripts/k8s/build.sh): %v", b, k8sDir(), err)
			}
			t.Skipf("two-node cluster needs %s (scripts/k8s/build.sh): %v", b, err)
		}
	}
	for _, tool := range []string{"nft", "nsenter", "unshare", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (make k8s-deps)", tool)
		}
	}
}

// upTwoNode brings up a cluster of the test's own, nagare and CoreDNS
// included; t.Cleanup tears it down. Tests that need nothing of it but a
// plain cluster share one instead (sharedTwoNode).
func upTwoNode(t *testing.T) *twoNode {
	t.Helper()
	return upTwoNodeWith(t, twoNodeOptions{})
}

func upTwoNodeWith(t *testing.T, o twoNodeOptions) *twoNode {
	t.Helper()
	requireTwoNode(t)
	releaseShared() // it holds the same bridge, namespaces and addresses
	c := newTwoNode(t, o)
	t.Cleanup(func() {
		if t.Failed() {
			c.dumpLogs(t)
		}
		c.down(t)
	})
	c.bringUp()
	return c
}

// newTwoNode makes the cluster's directory and records what teardown
// restores and checks (the sysctls, the host's state); nothing runs yet.
func newTwoNode(t *testing.T, o twoNodeOptions) *twoNode {
	t.Helper()
	root, _ := filepath.Abs("../..")
	dir, err := os.MkdirTemp("/var/tmp", "nagare-k8s2-")
	if err != nil {
		t.Fatal(err)
	}
	c := &twoNode{t: t, dir: dir, repoRoot: root, sysctls: map[string]string{}, opts: o}
	for _, s := range sysctlsKubeletTouches {
		if b, err := os.ReadFile("/proc/sys/" + s); err == nil {
			c.sysctls[s] = strings.TrimSpace(string(b))
		}
	}
	c.before = snapshotHost()
	for i := 1; i <= 2; i++ {
		c.nodes = append(c.nodes, &tnode{name: fmt.Sprintf("nagare-k8s-node%d", i), netns: fmt.Sprintf("nk8s-node%d", i),
			ip: fmt.Sprintf("10.250.0.%d", 10+i), veth: fmt.Sprintf("nk8s-n%d", i), dir: c.path(fmt.Sprintf("node%d", i)),
			cgroup: fmt.Sprintf("/nagare-k8s-node%d", i)})
	}
	return c
}

// bringUp starts everything, failing c.t on the first error; the caller
// has arranged for down to run whatever happens.
func (c *twoNode) bringUp() {
	c.t.Helper()
	for _, d := range []string{"pki", "logs"} {
		c.fatal(os.MkdirAll(c.path(d), 0o755))
	}
	start := time.Now()
	c.isolate() // first: nothing starts before the cluster is fenced in
	c.underlay()
	for _, n := range c.nodes {
		c.nodeNamespaces(n)
	}
	c.pki()
	c.etcd()
	c.apiserver()
	c.controllerManager()
	c.scheduler()
	c.nagareImage()
	for _, n := range c.nodes {
		c.containerd(n)
		c.importImages(n)
		c.kubelet(n)
	}
	c.nodeRoutes()
	c.nagare()
	c.coreDNS()
	c.upTime = time.Since(start)
	c.logf("two-node Kubernetes %s with nagare up in %v (files in %s)", k8sVersion, c.upTime.Round(time.Millisecond), c.dir)
}

func (c *twoNode) fatal(err error) {
	c.t.Helper()
	if err != nil {
		c.t.Fatal(err)
	}
}

// start runs a daemon with its output in logs/<name>.log. In a node
// (n != nil) it runs in the node's network and mount namespaces.
func (c *twoNode) start(n *tnode, name string, args ...string) *exec.Cmd {
	c.t.Helper()
	f, err := os.Create(c.path("logs", name+".log"))
	c.fatal(err)
	if n != nil {
		args = append([]string{"nsenter", fmt.Sprintf("--target=%d", n.holder.Process.Pid), "--mount", "--net"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := child.Start(cmd); err != nil { // dies with the test
		c.t.Fatalf("start %s: %v", name, err)
	}
	c.logf("started %s (pid %d)", name, cmd.Process.Pid)
	return cmd
}

func (c *twoNode) waitFor(what string, d time.Duration, cond func() error) {
	c.t.Helper()
	if err := poll(d, 250*time.Millisecond, cond); err != nil {
		c.t.Fatalf("%s: not within %v: %v", what, d, err)
	}
}

func (c *twoNode) kubectl(args ...string) (string, error) {
	return run(append([]string{filepath.Join(k8sDir(), "kubectl"), "--kubeconfig", c.kubecfg}, args...)...)
}

func (c *twoNode) mustKubectl(args ...string) string {
	c.t.Helper()
	out, err := c.kubectl(args...)
	c.fatal(err)
	return out
}

func (c *twoNode) apply(manifest string) {
	c.t.Helper()
	if _, err := runStdin(manifest, filepath.Join(k8sDir(), "kubectl"), "--kubeconfig", c.kubecfg, "apply", "-f", "-"); err != nil {
		c.t.Fatal(err)
	}
}

// inNode runs a command in a node's network and mount namespaces.
func (c *twoNode) inNode(n *tnode, args ...string) (string, error) {
	return run(append([]string{"nsenter", fmt.Sprintf("--target=%d", n.holder.Process.Pid), "--mount", "--net"}, args...)...)
}

// uplinkDevice is the interface of the root namespace's default route.
func uplinkDevice() string {
	out, _ := run("ip", "-4", "route", "show", "default")
	f := strings.Fields(out)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "dev" {
			return f[i+1]
		}
	}
	return ""
}

// isolate fences the cluster in before anything of it starts. A hostNetwork
// pod (the agent) or a node that sends to a ClusterIP nobody serves
// (nagare has no Services yet, and these nodes run no kube-proxy) routes it
// by the node's default route into the root namespace, and from there by
// the machine's default route off the machine; the same for a pod's
// masqueraded traffic to anything outside the cluster. An nftables egress
// hook on the default route's interface (netdev family: it sees every
// packet that leaves by that device, whatever path made it, forwarded or
// local) drops anything to the service, cluster and underlay CIDRs and
// anything from the cluster and underlay CIDRs. Counters tell that it was
// hit; selfCheckIsolation proves it with a packet to 10.96.0.1.
func (c *twoNode) isolate() {
	c.uplink = uplinkDevice()
	if c.uplink == "" {
		c.logf("isolation: no default route, nothing can leave by one")
		return
	}
	_, _ = run("nft", "delete", "table", "netdev", isoTable) // a crashed run's
	rules := fmt.Sprintf(`table netdev %s {
  chain egress {
    type filter hook egress device %q priority -500; policy accept;
    ip daddr { %s, %s, %s } counter drop comment "test cluster: to its CIDRs"
    ip saddr { %s, %s } counter drop comment "test cluster: from its CIDRs"
  }
}
`, isoTable, c.uplink, serviceCIDR, clusterCIDR, underlayCIDR, clusterCIDR, underlayCIDR)
	f := c.path("isolation.nft")
	c.fatal(os.WriteFile(f, []byte(rules), 0o644))
	if out, err := run("nft", "-f", f); err != nil {
		c.t.Fatalf("isolation rules: %v %s", err, out)
	}
	c.logf("isolation: egress on %s drops %s, %s, %s", c.uplink, serviceCIDR, clusterCIDR, underlayCIDR)
	c.selfCheckIsolation()
}

// isolationDrops is the sum of the isolation table's drop counters.
func isolationDrops() (uint64, error) {
	out, err := run("nft", "list", "table", "netdev", isoTable)
	if err != nil {
		return 0, err
	}
	var sum uint64
	f := strings.Fields(out)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "packets" {
			var n uint64
			fmt.Sscan(f[i+1], &n)
			sum += n
		}
	}
	return sum, nil
}

// selfCheckIsolation sends a UDP datagram to the kubernetes Service's
// ClusterIP from the root namespace, where no rule of the cluster catches
// it: the route is the machine's default, and the drop counter must count it.
func (c *twoNode) selfCheckIsolation() {
	before, err := isolationDrops()
	c.fatal(err)
	conn, err := net.Dial("udp4", "10.96.0.1:53")
	if err == nil {
		_, _ = conn.Write([]byte("nagare isolation check"))
		conn.Close()
	}
	c.waitFor("isolation drop counter", 5*time.Second, func() error {
		after, err := isolationDrops()
		if err == nil && after <= before {
			err = fmt.Errorf("a datagram to 10.96.0.1 was not dropped on %s (counter %d)", c.uplink, after)
		}
		return err
	})
}

// underlay makes the bridge and the nodes' network namespaces.
func (c *twoNode) underlay() {
	cmds := [][]string{
		{"ip", "link", "add", bridgeName, "type", "bridge"},
		{"ip", "addr", "add", cpAddr + "/24", "dev", bridgeName},
		{"ip", "link", "set", bridgeName, "up"},
	}
	for _, n := range c.nodes {
		cmds = append(cmds,
			[]string{"ip", "netns", "add", n.netns},
			[]string{"ip", "link", "add", n.veth, "type", "veth", "peer", "name", "eth0", "netns", n.netns},
			[]string{"ip", "link", "set", n.veth, "master", bridgeName, "up"},
			[]string{"ip", "-n", n.netns, "addr", "add", n.ip + "/24", "dev", "eth0"},
			[]string{"ip", "-n", n.netns, "link", "set", "lo", "up"},
			[]string{"ip", "-n", n.netns, "link", "set", "eth0", "up"},
			// A node has a default route, as a real one does: to the
			// control plane's namespace (where isolate's rules stop
			// anything that would go on off the machine).
			[]string{"ip", "-n", n.netns, "route", "add", "default", "via", cpAddr})
	}
	for _, a := range cmds {
		if out, err := run(a...); err != nil {
			c.t.Fatal(out, err)
		}
	}
}

// nodeDirs are the host paths that must be a node's own. kubelet and
// containerd place hostPath volumes, CNI files and sockets by absolute
// path: two nodes on one file system would share the DaemonSet's
// /var/run/nagare (the agent's and switch's sockets), /etc/cni/net.d,
// /opt/cni/bin, the kubelet's /var/lib/kubelet (its device-plugin socket
// lives there whatever --root-dir says) and containerd's runc state. Each
// node gets them in a mount namespace of its own, bind-mounted from its
// directory, the way a node container of kind gets its own file system.
var nodeDirs = []string{"/run/nagare", "/var/lib/nagare", "/opt/cni/bin", "/etc/cni/net.d", "/var/lib/kubelet",
	"/run/containerd", "/var/log/pods", "/var/log/containers", "/run/netns"}

// nodeNamespaces starts the node's holder: a process in the node's network
// namespace and a new mount namespace (slave of the root's, so nothing
// mounted in a node shows on the host), which makes the node's mounts and
// then sleeps; containerd and kubelet join both namespaces through it.
func (c *twoNode) nodeNamespaces(n *tnode) {
	for _, d := range nodeDirs {
		c.mkdirRoot(d)
		c.fatal(os.MkdirAll(filepath.Join(n.dir, "fs", d), 0o755))
	}
	var sh strings.Builder
	sh.WriteString("set -e\n")
	for _, d := range nodeDirs {
		fmt.Fprintf(&sh, "mount --bind %q %q\n", filepath.Join(n.dir, "fs", d), d)
	}
	// The pods' network namespaces are mounted by containerd under
	// /run/netns; the agent sees them through a HostToContainer (rslave)
	// mount of that directory, which only receives mounts made later if
	// the node's /run/netns is a shared mount.
	sh.WriteString("mount --make-shared /run/netns\n")
	// The switch pins its fast path under /sys/fs/bpf/nagare/br-int-*:
	// each node gets a BPF file system of its own (every bpffs mount is a
	// new instance), or the two switches would share their maps.
	// Shared, as on a systemd host: the DaemonSet's mount-bpffs mounts it
	// with Bidirectional propagation, refused on a private mount.
	// The host's own bpffs is unmounted in the node's namespace first (a
	// slave: the host keeps it), or the runtime finds that one, not
	// shared, under the node's.
	sh.WriteString("umount -l /sys/fs/bpf 2>/dev/null || true\nmount -t bpf -o mode=0700 bpffs /sys/fs/bpf\nmount --make-shared /sys/fs/bpf\n")
	fmt.Fprintf(&sh, "touch %q\nexec sleep 2147483647\n", filepath.Join(n.dir, "ready"))
	cmd := exec.Command("nsenter", "--net=/run/netns/"+n.netns, "unshare", "--mount", "--propagation", "slave", "sh", "-c", sh.String())
	f, err := os.Create(c.path("logs", n.netns+"-holder.log"))
	c.fatal(err)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.fatal(child.Start(cmd))
	n.holder = cmd
	c.waitFor(n.name+" namespaces", 10*time.Second, func() error {
		_, err := os.Stat(filepath.Join(n.dir, "ready"))
		return err
	})
	// The kubelet's cgroupRoot: two kubelets in one cgroup hierarchy would
	// each take the other's pod cgroups under /kubepods for orphans and
	// remove them.
	for _, ctl := range cgroupControllers() {
		d := filepath.Join("/sys/fs/cgroup", ctl, n.cgroup)
		c.fatal(os.MkdirAll(d, 0o755))
		if ctl == "cpuset" { // a cpuset child starts empty and takes no task until filled
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpuset", f))
				_ = os.WriteFile(filepath.Join(d, f), b, 0o644)
			}
		}
	}
}

// cgroupControllers lists the mounted cgroup v1 hierarchies.
func cgroupControllers() []string {
	var out []string
	ents, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range ents {
		if e.IsDir() && e.Name() != "unified" {
			out = append(out, e.Name())
		}
	}
	return out
}

// mkdirRoot makes a directory on the root file system (a mount point) and
// records the topmost one it made, for teardown.
func (c *twoNode) mkdirRoot(d string) {
	if _, err := os.Stat(d); err == nil {
		return
	}
	top := d
	for p := filepath.Dir(d); p != "/"; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil {
			break
		}
		top = p
	}
	c.fatal(os.MkdirAll(d, 0o755))
	c.madeDirs = append(c.madeDirs, top)
}

// pki: a CA, the API server's serving certificate (also for cpAddr and the
// kubernetes Service's ClusterIP), its client certificate for the kubelets
// (kubectl exec/logs, which the e2e tests use), the service account keys,
// a token file and the kubeconfigs.
func (c *twoNode) pki() {
	t := c.t
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nagare-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	c.fatal(err)
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, cn string, orgs []string, usage x509.ExtKeyUsage, dns []string, ips []net.IP) ([]byte, []byte) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn, Organization: orgs},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, DNSNames: dns, IPAddresses: ips}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, _ := x509.MarshalECPrivateKey(k)
		return der, kd
	}
	srv, srvKey := leaf(2, "kube-apiserver", nil, x509.ExtKeyUsageServerAuth,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(cpAddr), net.ParseIP("10.96.0.1")})
	kcl, kclKey := leaf(3, "kube-apiserver-kubelet-client", []string{"system:masters"}, x509.ExtKeyUsageClientAuth, nil, nil)
	saKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	saPub, _ := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	for _, w := range []struct {
		name, typ string
		der       []byte
	}{
		{"ca.crt", "CERTIFICATE", caDER}, {"apiserver.crt", "CERTIFICATE", srv}, {"apiserver.key", "EC PRIVATE KEY", srvKey},
		{"kubelet-client.crt", "CERTIFICATE", kcl}, {"kubelet-client.key", "EC PRIVATE KEY", kclKey},
		{"sa.key", "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)}, {"sa.pub", "PUBLIC KEY", saPub},
	} {
		c.fatal(writePEM(c.path("pki", w.name), w.typ, w.der))
	}
	tokens := "admin-token,admin,admin,system:masters\n"
	for _, n := range c.nodes {
		tokens += fmt.Sprintf("kubelet-%s,system:node:%s,kubelet-%s,system:nodes\n", n.name, n.name, n.name)
	}
	c.fatal(os.WriteFile(c.path("pki", "tokens.csv"), []byte(tokens), 0o600))
	c.kubecfg = c.path("admin.kubeconfig")
	c.kubeconfig(c.kubecfg, "admin-token")
	for _, n := range c.nodes {
		c.kubeconfig(filepath.Join(n.dir, "kubelet.kubeconfig"), "kubelet-"+n.name)
	}
}

func (c *twoNode) kubeconfig(path, token string) {
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://%s:6443", certificate-authority: %q}
users:
- name: u
  user: {token: %q}
contexts:
- name: local
  context: {cluster: local, user: u}
current-context: local
`, cpAddr, c.path("pki", "ca.crt"), token)
	c.fatal(os.WriteFile(path, []byte(cfg), 0o600))
}

// etcd listens on the bridge's address, not loopback, so the single-node
// harness (127.0.0.1:2379) may run beside this one.
func (c *twoNode) etcd() {
	url := "http://" + cpAddr + ":2379"
	c.cp = append(c.cp, c.start(nil, "etcd", "etcd", "--data-dir", c.path("etcd"), "--listen-client-urls", url,
		"--advertise-client-urls", url, "--listen-peer-urls", "http://"+cpAddr+":2380",
		"--initial-advertise-peer-urls", "http://"+cpAddr+":2380", "--initial-cluster", "default=http://"+cpAddr+":2380"))
	c.waitFor("etcd", 30*time.Second, func() error {
		_, err := run("etcdctl", "--endpoints", url, "endpoint", "health")
		return err
	})
}

// apiserver: on the bridge's address, which is also the kubernetes
// Service's endpoint (the default lease reconciler publishes it; an
// endpoint in 127.0.0.0/8 would be useless to pods).
func (c *twoNode) apiserver() {
	p := func(n string) string { return c.path("pki", n) }
	c.cp = append(c.cp, c.start(nil, "kube-apiserver", filepath.Join(k8sDir(), "kube-apiserver"),
		"--bind-address="+cpAddr, "--advertise-address="+cpAddr, "--secure-port=6443",
		"--etcd-servers=http://"+cpAddr+":2379", "--token-auth-file="+p("tokens.csv"), "--client-ca-file="+p("ca.crt"),
		"--tls-cert-file="+p("apiserver.crt"), "--tls-private-key-file="+p("apiserver.key"),
		"--kubelet-client-certificate="+p("kubelet-client.crt"), "--kubelet-client-key="+p("kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP",
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file="+p("sa.pub"),
		"--service-account-signing-key-file="+p("sa.key"), "--service-cluster-ip-range="+serviceCIDR,
		"--allow-privileged=true", "--cert-dir="+c.path("pki")))
	c.waitFor("kube-apiserver /readyz", 90*time.Second, func() error { _, err := c.kubectl("get", "--raw", "/readyz"); return err })
}

func (c *twoNode) controllerManager() {
	c.cp = append(c.cp, c.start(nil, "kube-controller-manager", filepath.Join(k8sDir(), "kube-controller-manager"),
		"--kubeconfig="+c.kubecfg, "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=10357",
		"--controllers=*", "--allocate-node-cidrs=true", "--cluster-cidr="+clusterCIDR, "--node-cidr-mask-size=24",
		"--service-cluster-ip-range="+serviceCIDR,
		"--root-ca-file="+c.path("pki", "ca.crt"), "--service-account-private-key-file="+c.path("pki", "sa.key"),
		"--use-service-account-credentials=false"))
	c.waitFor("default service account", 60*time.Second, func() error { _, err := c.kubectl("get", "serviceaccount", "default"); return err })
}

// scheduler: the real one (the single-node harness binds pods itself).
func (c *twoNode) scheduler() {
	c.cp = append(c.cp, c.start(nil, "kube-scheduler", filepath.Join(k8sDir(), "kube-scheduler"),
		"--kubeconfig="+c.kubecfg, "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=10359"))
}

// nagareImage builds nagare:dev once for both nodes (scripts/k8s/image.sh,
// as a user does) and the binaries teardown runs.
func (c *twoNode) nagareImage() {
	img := exec.Command(filepath.Join(c.repoRoot, "scripts/k8s/image.sh"), c.path("nagare-image.tar"))
	if out, err := img.CombinedOutput(); err != nil {
		c.t.Fatalf("scripts/k8s/image.sh: %v\n%s", err, out)
	}
	cmd := exec.Command("go", "build", "-o", c.path("nagare-bin")+"/", "./cmd/nagare-agent", "./cmd/nagare-switch")
	cmd.Dir = c.repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		c.t.Fatalf("build nagare: %v\n%s", err, out)
	}
}

// containerd: its own root, state and socket. hostNetwork pods get no
// network namespace from the CRI plugin: runc leaves the container in the
// namespace it runs in, which is containerd's (through its shim), i.e. the
// node's. That is what puts the nagare DaemonSet on each node's network.
func (c *twoNode) containerd(n *tnode) {
	c.fatal(os.MkdirAll(filepath.Join(n.dir, "fs/opt/cni/bin"), 0o755))
	// The runtime's own loopback plugin; nagare-cni arrives with the DaemonSet.
	if out, err := run("cp", "/usr/lib/cni/loopback", filepath.Join(n.dir, "fs/opt/cni/bin")+"/"); err != nil {
		c.t.Fatal(out, err)
	}
	n.sock = filepath.Join(n.dir, "containerd.sock")
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
# Its "opt" plugin would make /opt/containerd on the machine.
[plugins."io.containerd.internal.v1.opt"]
  path = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
`, filepath.Join(n.dir, "containerd/root"), filepath.Join(n.dir, "containerd/state"), n.sock, filepath.Join(n.dir, "containerd/opt"))
	toml := filepath.Join(n.dir, "containerd.toml")
	c.fatal(os.WriteFile(toml, []byte(cfg), 0o644))
	c.cp = append(c.cp, c.start(n, n.netns+"-containerd", "containerd", "--config", toml))
	c.waitFor(n.name+" containerd", 30*time.Second, func() error { _, err := run("ctr", "--address", n.sock, "version"); return err })
}

// importImages imports every image of the cache (scripts/k8s/build.sh) and
// nagare:dev into the node's containerd: nothing is ever pulled.
func (c *twoNode) importImages(n *tnode) {
	tars, _ := filepath.Glob(filepath.Join(k8sDir(), "images", "*.tar"))
	tars = append(append(tars, c.path("nagare-image.tar")), c.opts.extraImages...)
	for _, tar := range tars {
		if out, err := run("ctr", "--address", n.sock, "-n", "k8s.io", "images", "import", tar); err != nil {
			c.t.Fatalf("import %s into %s: %v %s", tar, n.name, err, out)
		}
	}
	c.logf("%s: %d images imported", n.name, len(tars))
}

func (c *twoNode) kubelet(n *tnode) {
	// Lookups by pods with dnsPolicy Default (and hostNetwork pods) go to
	// the node's resolv.conf: the control plane's address, where nothing
	// answers on 53, so they fail at once and stay on the machine.
	resolv := filepath.Join(n.dir, "resolv.conf")
	c.fatal(os.WriteFile(resolv, []byte("nameserver "+cpAddr+"\n"), 0o644))
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: %s
failSwapOn: false
makeIPTablesUtilChains: false
protectKernelDefaults: false
address: %s
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %q}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://%s
imageServiceEndpoint: unix://%s
resolvConf: %s
clusterDNS: [%s]
clusterDomain: cluster.local
serializeImagePulls: false
evictionHard: {}
imageGCHighThresholdPercent: 100
`, n.cgroup, n.ip, c.path("pki", "ca.crt"), n.sock, n.sock, resolv, kubeDNSIP)
	y := filepath.Join(n.dir, "kubelet.yaml")
	c.fatal(os.WriteFile(y, []byte(cfg), 0o644))
	c.cp = append(c.cp, c.start(n, n.netns+"-kubelet", filepath.Join(k8sDir(), "kubelet"),
		"--kubeconfig="+filepath.Join(n.dir, "kubelet.kubeconfig"), "--config="+y,
		"--hostname-override="+n.name, "--node-ip="+n.ip))
	c.waitFor(n.name+" registered with a pod CIDR", 90*time.Second, func() error {
		out, err := c.kubectl("get", "node", n.name, "-o", "jsonpath={.spec.podCIDR}")
		if err == nil && strings.TrimSpace(out) == "" {
			err = fmt.Errorf("no podCIDR yet")
		}
		return err
	})
}

// nodeRoutes: the API server reaches pods (its pod proxy, which the e2e
// Proxy tests use) through the node that has them.
func (c *twoNode) nodeRoutes() {
	for _, n := range c.nodes {
		cidr := strings.TrimSpace(c.mustKubectl("get", "node", n.name, "-o", "jsonpath={.spec.podCIDR}"))
		if out, err := run("ip", "route", "replace", cidr, "via", n.ip, "dev", bridgeName); err != nil {
			c.t.Fatal(out, err)
		}
	}
}

// nagareManifest is deploy/ (rendered), unchanged but for the API server's
// address: the agent cannot use the kubernetes Service (nagare serves no
// ClusterIP yet, and these nodes run no kube-proxy), so it is given the
// API server itself, as Antrea's kubeAPIServerOverride does.
func (c *twoNode) nagareManifest() string {
	b := deployManifest(c.t, c.repoRoot)
	s := strings.Replace(b, "        - name: NODE_NAME\n", fmt.Sprintf(`        - {name: KUBERNETES_SERVICE_HOST, value: %q}
        - {name: KUBERNETES_SERVICE_PORT, value: "6443"}
        - name: NODE_NAME
`, cpAddr), 1)
	if !strings.Contains(s, "KUBERNETES_SERVICE_HOST") {
		c.t.Fatal("deploy/ rendered: no NODE_NAME entry where the test puts the API server's address")
	}
	if c.opts.image != "" {
		if !strings.Contains(s, "image: nagare:dev\n") {
			c.t.Fatal("deploy/ rendered: no image nagare:dev to replace")
		}
		s = strings.ReplaceAll(s, "image: nagare:dev\n", "image: "+c.opts.image+"\n")
	}
	return s
}

func (c *twoNode) agentStatus(ctx context.Context, n *tnode) (*agent.Status, error) {
	return agent.FetchStatus(ctx, filepath.Join(n.dir, "fs/run/nagare/agent.sock"))
}

func (c *twoNode) nagare() {
	c.apply(c.nagareManifest())
	c.waitNagare()
}

// waitNagare waits for both nodes' agents to have their switch and the
// other node's tunnel, and for both nodes to be Ready.
func (c *twoNode) waitNagare() {
	c.t.Helper()
	for _, n := range c.nodes {
		c.waitFor("nagare agent on "+n.name, 3*time.Minute, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, err := c.agentStatus(ctx, n)
			if err != nil {
				out, _ := c.kubectl("-n", "kube-system", "get", "pods", "-o", "wide")
				return fmt.Errorf("%v; pods: %s", err, out)
			}
			if !st.Switch.Connected || len(st.Remotes) < 1 {
				return fmt.Errorf("agent: switch connected %v, remote nodes %d", st.Switch.Connected, len(st.Remotes))
			}
			return nil
		})
	}
	c.waitFor("both nodes Ready", 2*time.Minute, func() error {
		out, err := c.kubectl("get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}`)
		if err == nil && strings.Count(out, "=True") != 2 {
			err = fmt.Errorf("nodes: %s", out)
		}
		return err
	})
}

// coreDNSManifest: CoreDNS as cluster DNS, a Deployment behind the kube-dns
// Service at 10.96.0.10 (the kubelets' clusterDNS). No forward plugin:
// names outside cluster.local get no answer, so no query leaves the
// machine. It reaches the API server directly, as the agent does.
func coreDNSManifest() string {
	return fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
  - apiGroups: [""]
    resources: [endpoints, services, pods, namespaces]
    verbs: [list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:53 {
        errors
        health :8080
        ready :8181
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
            ttl 30
        }
        cache 30
        loadbalance
    }
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: coredns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  replicas: 2
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      serviceAccountName: coredns
      priorityClassName: system-cluster-critical
      dnsPolicy: Default
      tolerations: [{operator: Exists}]
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 100
              podAffinityTerm: {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {k8s-app: kube-dns}}}
      containers:
        - name: coredns
          image: registry.k8s.io/coredns/coredns:%s
          imagePullPolicy: Never
          args: [-conf, /etc/coredns/Corefile]
          env:
            - {name: KUBERNETES_SERVICE_HOST, value: %q}
            - {name: KUBERNETES_SERVICE_PORT, value: "6443"}
          ports:
            - {containerPort: 53, name: dns, protocol: UDP}
            - {containerPort: 53, name: dns-tcp, protocol: TCP}
          readinessProbe: {httpGet: {path: /ready, port: 8181}, periodSeconds: 2}
          livenessProbe: {httpGet: {path: /health, port: 8080}, initialDelaySeconds: 30}
          volumeMounts: [{name: config, mountPath: /etc/coredns}]
      volumes: [{name: config, configMap: {name: coredns}}]
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: %s
  selector: {k8s-app: kube-dns}
  ports:
    - {name: dns, port: 53, protocol: UDP, targetPort: 53}
    - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
`, coreDNSTag, cpAddr, kubeDNSIP)
}

func (c *twoNode) coreDNS() {
	if _, err := os.Stat(filepath.Join(k8sDir(), "images", "registry.k8s.io_coredns_coredns_"+coreDNSTag+".tar")); err != nil {
		c.logf("no CoreDNS image (%v): the cluster has no DNS", err)
		return
	}
	c.apply(coreDNSManifest())
	c.waitFor("CoreDNS ready", 3*time.Minute, func() error {
		out, err := c.kubectl("-n", "kube-system", "get", "deploy", "coredns", "-o", "jsonpath={.status.readyReplicas}")
		if err == nil && strings.TrimSpace(out) != "2" {
			pods, _ := c.kubectl("-n", "kube-system", "get", "pods", "-o", "wide")
			err = fmt.Errorf("ready replicas %q; %s", out, pods)
		}
		return err
	})
}

// teardownReport is where down reports what it finds: the test's
// *testing.T, or a report of its own for a cluster that outlives a test
// (the shared one's mainReport).
type teardownReport interface {
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
	Failed() bool
}

// down tears everything down in reverse and checks that the host is as it
// was: pods first (their CNI DELs must reach the agents while they run),
// then the kubelets' containers, kubelets, containerds and shims, nagare's
// node state, the nodes' namespaces, the control plane, the bridge, the
// cgroups, the isolation rules, the sysctls the kubelets rewrote. What it
// finds wrong goes to t: the test's own for a cluster of its own, TestMain's
// report for the shared one (sharedTwoNode; its tests have ended by then).
func (c *twoNode) down(t teardownReport) {
	if c.kubecfg != "" {
		_, _ = c.kubectl("-n", "kube-system", "delete", "deployment", "coredns", "--ignore-not-found", "--timeout=30s")
		nss, _ := c.kubectl("get", "ns", "-o", "jsonpath={.items[*].metadata.name}")
		for _, ns := range strings.Fields(nss) {
			if ns == "kube-system" {
				_, _ = c.kubectl("-n", ns, "delete", "pods", "-l", "k8s-app=kube-dns", "--grace-period=0", "--force", "--timeout=30s")
				continue
			}
			_, _ = c.kubectl("-n", ns, "delete", "pods", "--all", "--grace-period=0", "--force", "--timeout=30s")
		}
		// A forced delete returns before the kubelets have stopped the
		// sandboxes: wait for the CNI DELs to reach the agents.
		deadline := time.Now().Add(60 * time.Second)
		for _, n := range c.nodes {
			_ = poll(time.Until(deadline), 250*time.Millisecond, func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if st, err := c.agentStatus(ctx, n); err == nil && len(st.Pods) > 0 {
					return fmt.Errorf("%d pods attached", len(st.Pods))
				}
				return nil // none left, or no agent to ask
			})
		}
	}
	stop := func(p *exec.Cmd) { stopGroup(p, 15*time.Second) }
	for i := len(c.cp) - 1; i >= 0; i-- {
		p := c.cp[i]
		stop(p)
		name := strings.Join(p.Args, " ")
		if strings.Contains(name, "/kubelet ") {
			// Containers outlive the kubelet, their processes their shims:
			// kill every task while containerd still runs.
			for _, n := range c.nodes {
				if strings.Contains(name, n.name) && n.sock != "" {
					killTasksAt(n.sock, c.dir)
				}
			}
		}
		if strings.Contains(name, "containerd --config") {
			killShims(c.dir)
		}
	}
	killShims(c.dir)
	if leaked := processesRootedIn(c.dir); len(leaked) > 0 {
		for _, pid := range leaked {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		t.Errorf("container processes outlived the cluster: %v", leaked)
	}
	for _, n := range c.nodes {
		if n.holder == nil {
			continue
		}
		// nagare's node-wide state, in the node's namespaces (its BPF
		// pins are in the node's own bpffs).
		bin := c.path("nagare-bin")
		if _, err := os.Stat(filepath.Join(bin, "nagare-agent")); err == nil {
			for _, args := range [][]string{
				{filepath.Join(bin, "nagare-agent"), "cleanup", "--keep-cni", "--node-name", ""},
				{filepath.Join(bin, "nagare-switch"), "--bridge", "br-int", "--run-dir", "/run/nagare", "--destroy"},
			} {
				if out, err := c.inNode(n, args...); err != nil {
					t.Errorf("cleanup on %s: %v %s", n.name, err, out)
				}
			}
		}
		stop(n.holder) // the node's mount namespace, and every mount in it, go with it
	}
	for _, n := range c.nodes {
		_, _ = run("ip", "netns", "del", n.netns)
		// The namespace, and with it the veth's other end, goes when the
		// kernel's asynchronous netns cleanup gets to it (seconds on a
		// loaded machine: the leftover check below saw nk8s-n2 then):
		// delete the root end now.
		_, _ = run("ip", "link", "del", n.veth)
		// unified too: the kubelet mirrors its cgroups into the hybrid cgroup2 mount.
		for _, ctl := range append(cgroupControllers(), "unified") {
			removeCgroupTree(filepath.Join("/sys/fs/cgroup", ctl, n.cgroup))
		}
	}
	_, _ = run("ip", "link", "del", bridgeName)
	if c.uplink != "" {
		if out, err := run("nft", "delete", "table", "netdev", isoTable); err != nil {
			t.Errorf("isolation rules: %v %s", err, out)
		}
	}
	for s, v := range c.sysctls {
		_ = os.WriteFile("/proc/sys/"+s, []byte(v), 0o644)
	}
	mounts := mountsUnder(c.dir)
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := unix.Unmount(mounts[i], unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", mounts[i], err)
		}
	}
	for i := len(c.madeDirs) - 1; i >= 0; i-- {
		_ = removeEmptyTree(c.madeDirs[i])
	}
	if !t.Failed() || os.Getenv("NAGARE_K8S_KEEP") == "" {
		_ = os.RemoveAll(c.dir)
	}
	if left := c.before.leftovers(snapshotHost()); len(left) > 0 {
		t.Errorf("the test left on the host: %s", strings.Join(left, "; "))
	}
	for _, n := range c.nodes {
		if _, err := os.Stat("/run/netns/" + n.netns); err == nil {
			t.Errorf("the test left network namespace %s", n.netns)
		}
	}
}

// killTasksAt kills every container task of one containerd.
func killTasksAt(sock, dir string) {
	out, err := run("ctr", "--address", sock, "-n", "k8s.io", "tasks", "ls", "-q")
	if err != nil {
		return
	}
	for _, id := range strings.Fields(out) {
		_, _ = run("ctr", "--address", sock, "-n", "k8s.io", "tasks", "kill", "-a", "-s", "SIGKILL", id)
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) && len(processesRootedIn(dir)) > 0 {
		time.Sleep(100 * time.Millisecond)
	}
}

// removeCgroupTree removes a cgroup v1 directory and its children, deepest
// first (a cgroup directory is removed with rmdir, never its files).
func removeCgroupTree(d string) {
	ents, err := os.ReadDir(d)
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.IsDir() {
			removeCgroupTree(filepath.Join(d, e.Name()))
		}
	}
	_ = unix.Rmdir(d)
}

// removeEmptyTree removes d and its subdirectories if they hold no file.
func removeEmptyTree(d string) error {
	ents, err := os.ReadDir(d)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.IsDir() {
			return errors.New("not empty")
		}
		if err := removeEmptyTree(filepath.Join(d, e.Name())); err != nil {
			return err
		}
	}
	return os.Remove(d)
}

// dumpLogs logs the tails of the nodes' and kube-system pods' logs and the
// cluster's pods and events, for a test that failed.
func (c *twoNode) dumpLogs(t teardownReport) {
	tail := func(path string, n int) string {
		b, _ := os.ReadFile(path)
		lines := strings.Split(string(b), "\n")
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		return strings.Join(lines, "\n")
	}
	for _, n := range c.nodes {
		for _, d := range []string{"kubelet", "containerd"} {
			t.Logf("--- %s %s log (tail) ---\n%s", n.name, d, tail(c.path("logs", n.netns+"-"+d+".log"), 30))
		}
		logs, _ := filepath.Glob(filepath.Join(n.dir, "fs/var/log/pods", "kube-system_*", "*", "*.log"))
		for _, l := range logs {
			t.Logf("--- %s ---\n%s", l, tail(l, 30))
		}
	}
	if c.kubecfg != "" {
		for _, args := range [][]string{{"get", "pods", "-A", "-o", "wide"}, {"get", "events", "-A", "--sort-by=.lastTimestamp"}} {
			out, err := c.kubectl(args...)
			t.Logf("--- kubectl %s ---\n%s %v", strings.Join(args, " "), out, err)
		}
	}
}

// scanLines calls f for each line of r (used to follow e2e.test).
func scanLines(r *os.File, f func(string)) {
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		f(s.Text())
	}
}
