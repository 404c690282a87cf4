// Package k8s tests nagare on a real Kubernetes, started by the test.
// Two harnesses: this file's, on loopback (etcd, kube-apiserver,
// kube-controller-manager, containerd (CRI) and kubelet, one node, a
// stand-in binder: TestKubernetesNagare), and twonode_test.go's, two
// kubelets in their own network namespaces with a real scheduler, CoreDNS
// and the [sig-network] conformance run (docs/k8s-conformance.md). Images
// are made locally as OCI tars (no registry). Recipe and traps:
// shared/reference/kubernetes-local.md.
//
// The Kubernetes binaries come from scripts/k8s/build.sh (cached in
// /var/cache/nagare/k8s/<version>); without them the tests skip, unless
// CI=true or NAGARE_K8S=1, where a missing build is a failure.
package k8s

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nagare-net/nagare/internal/child"
	"github.com/nagare-net/nagare/internal/oci"
	"github.com/nagare-net/nagare/pkg/agent/snat"
)

const k8sVersion = "v1.33.13"

func k8sDir() string {
	if d := os.Getenv("K8S_CACHE"); d != "" {
		return d
	}
	return "/var/cache/nagare/k8s/" + k8sVersion
}

// cluster is one Kubernetes node on loopback.
type cluster struct {
	t          *testing.T
	dir        string
	node       string
	procs      []*exec.Cmd
	sysctls    map[string]string
	kubecfg    string
	ctrSock    string
	cniBin     string
	cniConf    string
	repoRoot   string
	stopBinder func()
	before     hostState
	// Paths the kubelet and containerd make on the machine whatever their
	// flags say (device-plugin socket, container log links, runc state,
	// the QoS cgroups): removed at teardown when the test made them.
	hostMade []string
}

var hostPathsKubeletMakes = []string{"/var/lib/kubelet", "/var/log/containers", "/run/containerd"}

// sysctlsKubeletTouches are restored at teardown (kubelet rewrites some at
// start; nagare sets ip_forward on its node).
var sysctlsKubeletTouches = []string{"kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory", "net/ipv4/ip_forward",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}

func requireK8s(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 || testing.Short() {
		t.Skip("needs root (skipped in -short mode)")
	}
	for _, b := range []string{"kube-apiserver", "kubelet", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(k8sDir(), b)); err != nil {
			if os.Getenv("CI") == "true" || os.Getenv("NAGARE_K8S") == "1" {
				t.Fatalf("Kubernetes binaries missing in %s (run scripts/k8s/build.sh): %v", k8sDir(), err)
			}
			t.Skipf("Kubernetes binaries not built (scripts/k8s/build.sh; %v)", err)
		}
	}
	for _, tool := range []string{"etcd", "containerd", "runc", "ctr", "kubectl", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (make k8s-deps)", tool)
		}
	}
}

func (c *cluster) logf(format string, args ...any) {
	c.t.Helper()
	c.t.Logf("[%s] %s", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// up brings the whole node up; t.Cleanup tears it down.
func up(t *testing.T) *cluster {
	t.Helper()
	start := time.Now()
	c := upAPIServer(t)
	c.sharedBPFFS()
	c.controllerManager()
	c.containerd()
	c.images()
	c.kubelet()
	c.binder()
	c.logf("Kubernetes %s up in %v (node %s, files in %s)", k8sVersion, time.Since(start).Round(time.Millisecond), c.node, c.dir)
	return c
}

// sharedBPFFS makes the machine's /sys/fs/bpf a shared mount for the
// test, as it is on a systemd host: the DaemonSet's mount-bpffs mounts it
// with Bidirectional propagation, which the runtime refuses on a private
// mount. Teardown makes it private again if it was.
func (c *cluster) sharedBPFFS() {
	out, err := run("findmnt", "-n", "-o", "PROPAGATION", "/sys/fs/bpf")
	if err != nil || strings.TrimSpace(out) == "shared" {
		return
	}
	if out, err := run("mount", "--make-shared", "/sys/fs/bpf"); err != nil {
		c.t.Fatal(out, err)
	}
	c.t.Cleanup(func() { _, _ = run("mount", "--make-private", "/sys/fs/bpf") })
}

// upAPIServer starts etcd and kube-apiserver alone (no node): enough to
// validate objects against the real API (kubectl apply --dry-run=server).
func upAPIServer(t *testing.T) *cluster {
	t.Helper()
	requireK8s(t)
	releaseShared() // one cluster at a time: each one's host checks assume it is alone
	root, _ := filepath.Abs("../..")
	dir, err := os.MkdirTemp("/var/tmp", "nagare-k8s-")
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, dir: dir, node: "nagare-k8s-node", sysctls: map[string]string{}, repoRoot: root}
	for _, s := range sysctlsKubeletTouches {
		if b, err := os.ReadFile("/proc/sys/" + s); err == nil {
			c.sysctls[s] = strings.TrimSpace(string(b))
		}
	}
	c.before = snapshotHost()
	for _, p := range hostPathsKubeletMakes {
		if _, err := os.Stat(p); err != nil {
			c.hostMade = append(c.hostMade, p)
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory/kubepods"); err != nil {
		for _, ctl := range append(cgroupControllers(), "unified") { // the kubelet mirrors them into the hybrid cgroup2 mount
			c.hostMade = append(c.hostMade, filepath.Join("/sys/fs/cgroup", ctl, "kubepods"))
		}
	}
	t.Cleanup(c.down)
	c.cniBin, c.cniConf = filepath.Join(dir, "cni/bin"), filepath.Join(dir, "cni/net.d")
	for _, d := range []string{c.cniBin, c.cniConf, filepath.Join(dir, "pki"), filepath.Join(dir, "logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The agent sees pods' network namespaces, made after it started,
	// through a HostToContainer mount of /run/netns: the host side must be
	// a shared mount point, which is what `ip netns add` makes of it (on a
	// systemd host everything is shared already).
	if err := exec.Command("findmnt", "-n", "/run/netns").Run(); err != nil {
		for _, args := range [][]string{{"mkdir", "-p", "/run/netns"}, {"mount", "--bind", "/run/netns", "/run/netns"}, {"mount", "--make-shared", "/run/netns"}} {
			if out, err := run(args...); err != nil {
				t.Fatal(out, err)
			}
		}
	}
	c.pki()
	c.etcd()
	c.apiserver()
	return c
}

func (c *cluster) path(p ...string) string { return filepath.Join(append([]string{c.dir}, p...)...) }

// start runs a daemon with its output in logs/<name>.log.
func (c *cluster) start(name string, args ...string) *exec.Cmd {
	c.t.Helper()
	f, err := os.Create(c.path("logs", name+".log"))
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := child.Start(cmd); err != nil { // dies with the test
		c.t.Fatalf("start %s: %v", name, err)
	}
	c.logf("started %s (pid %d)", name, cmd.Process.Pid)
	c.procs = append(c.procs, cmd)
	return cmd
}

// waitFor polls cond until it is nil or the deadline passes.
func (c *cluster) waitFor(what string, d time.Duration, cond func() error) {
	c.t.Helper()
	if err := poll(d, 200*time.Millisecond, cond); err != nil {
		c.t.Fatalf("%s: not within %v: %v", what, d, err)
	}
}

// poll calls cond every interval until it returns nil or d has passed,
// and returns its last error then.
func poll(d, every time.Duration, cond func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil || !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(every)
	}
}

func run(args ...string) (string, error) {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// kubectl runs kubectl as the cluster's admin.
func (c *cluster) kubectl(args ...string) (string, error) {
	return run(append([]string{"kubectl", "--kubeconfig", c.kubecfg}, args...)...)
}

func (c *cluster) mustKubectl(args ...string) string {
	c.t.Helper()
	out, err := c.kubectl(args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// pki makes a CA, the API server's serving certificate, the service
// account keys, a token file and the kubeconfigs.
func (c *cluster) pki() {
	t := c.t
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nagare-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	srvKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	saKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	srvKeyDER, _ := x509.MarshalECPrivateKey(srvKey)
	saPub, _ := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	for _, w := range []struct {
		name, typ string
		der       []byte
	}{
		{"ca.crt", "CERTIFICATE", caDER}, {"apiserver.crt", "CERTIFICATE", srvDER}, {"apiserver.key", "EC PRIVATE KEY", srvKeyDER},
		{"sa.key", "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)}, {"sa.pub", "PUBLIC KEY", saPub},
	} {
		if err := writePEM(c.path("pki", w.name), w.typ, w.der); err != nil {
			t.Fatal(err)
		}
	}
	tokens := fmt.Sprintf("admin-token,admin,admin,system:masters\nkubelet-token,system:node:%s,kubelet,system:nodes\n", c.node)
	if err := os.WriteFile(c.path("pki", "tokens.csv"), []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}
	c.kubecfg = c.path("admin.kubeconfig")
	c.kubeconfig(c.kubecfg, "admin-token")
	c.kubeconfig(c.path("kubelet.kubeconfig"), "kubelet-token")
}

func (c *cluster) kubeconfig(path, token string) {
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://127.0.0.1:6443", certificate-authority: %q}
users:
- name: u
  user: {token: %q}
contexts:
- name: local
  context: {cluster: local, user: u}
current-context: local
`, c.path("pki", "ca.crt"), token)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) etcd() {
	c.start("etcd", "etcd", "--data-dir", c.path("etcd"), "--listen-client-urls", "http://127.0.0.1:2379",
		"--advertise-client-urls", "http://127.0.0.1:2379", "--listen-peer-urls", "http://127.0.0.1:2380")
	c.waitFor("etcd", 30*time.Second, func() error {
		_, err := run("etcdctl", "--endpoints", "http://127.0.0.1:2379", "endpoint", "health")
		return err
	})
}

func (c *cluster) apiserver() {
	p := func(n string) string { return c.path("pki", n) }
	c.start("kube-apiserver", filepath.Join(k8sDir(), "kube-apiserver"),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=6443",
		"--etcd-servers=http://127.0.0.1:2379", "--token-auth-file="+p("tokens.csv"), "--client-ca-file="+p("ca.crt"),
		"--tls-cert-file="+p("apiserver.crt"), "--tls-private-key-file="+p("apiserver.key"),
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file="+p("sa.pub"),
		"--service-account-signing-key-file="+p("sa.key"), "--service-cluster-ip-range=10.96.0.0/16",
		"--endpoint-reconciler-type=none", "--allow-privileged=true", "--cert-dir="+c.path("pki"))
	c.waitFor("kube-apiserver /readyz", 90*time.Second, func() error { _, err := c.kubectl("get", "--raw", "/readyz"); return err })
}

func (c *cluster) controllerManager() {
	c.start("kube-controller-manager", filepath.Join(k8sDir(), "kube-controller-manager"),
		"--kubeconfig="+c.kubecfg, "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=10257",
		"--controllers=*", "--allocate-node-cidrs=true", "--cluster-cidr=10.78.0.0/16", "--node-cidr-mask-size=24",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--root-ca-file="+c.path("pki", "ca.crt"), "--service-account-private-key-file="+c.path("pki", "sa.key"),
		"--use-service-account-credentials=false")
	c.waitFor("default service account", 60*time.Second, func() error { _, err := c.kubectl("get", "serviceaccount", "default"); return err })
}

func (c *cluster) containerd() {
	// The runtime's own loopback plugin; nagare-cni arrives with the DaemonSet.
	if out, err := run("cp", "/usr/lib/cni/loopback", c.cniBin+"/"); err != nil {
		c.t.Fatal(out, err)
	}
	c.ctrSock = c.path("containerd.sock")
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
# Its "opt" plugin would make /opt/containerd on the machine.
[plugins."io.containerd.internal.v1.opt"]
  path = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/library/pause:local"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, c.path("containerd/root"), c.path("containerd/state"), c.ctrSock, c.path("containerd/opt"), c.cniBin, c.cniConf)
	if err := os.WriteFile(c.path("containerd.toml"), []byte(cfg), 0o644); err != nil {
		c.t.Fatal(err)
	}
	c.start("containerd", "containerd", "--config", c.path("containerd.toml"))
	c.waitFor("containerd", 30*time.Second, func() error { _, err := run("ctr", "--address", c.ctrSock, "version"); return err })
}

func (c *cluster) ctr(args ...string) (string, error) {
	return run(append([]string{"ctr", "--address", c.ctrSock, "-n", "k8s.io"}, args...)...)
}

// images builds pause, busybox and nagare:dev and imports them.
func (c *cluster) images() {
	t := c.t
	src := c.path("pause.c")
	if err := os.WriteFile(src, []byte(`#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
static void quit(int s) { (void)s; exit(0); }
int main(void) { signal(SIGTERM, quit); signal(SIGINT, quit); for (;;) pause(); }
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run("gcc", "-static", "-O2", "-o", c.path("pause"), src); err != nil {
		t.Fatal(out, err)
	}
	bin := c.path("nagare-bin")
	cmd := exec.Command("go", "build", "-o", bin+"/", "./cmd/nagare-agent", "./cmd/nagare-switch", "./cmd/nagare-cni", "./cmd/nagarectl")
	cmd.Dir = c.repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build nagare: %v\n%s", err, out)
	}
	bb := map[string]oci.File{"/bin/busybox": {Src: "/bin/busybox"}}
	for _, a := range []string{"sh", "sleep", "ping", "nc", "ip", "cat", "ls", "wget", "true"} {
		bb["/bin/"+a] = oci.File{Link: "busybox"}
	}
	for _, img := range []struct {
		ref   string
		files map[string]oci.File
		entry []string
	}{
		{"docker.io/library/pause:local", map[string]oci.File{"/pause": {Src: c.path("pause")}}, []string{"/pause"}},
		{"docker.io/library/busybox:local", bb, []string{"/bin/sh"}},
	} {
		tarPath := c.path(strings.NewReplacer("/", "_", ":", "_").Replace(img.ref) + ".tar")
		if err := oci.Build(tarPath, img.ref, img.files, img.entry); err != nil {
			t.Fatal(err)
		}
		if out, err := c.ctr("images", "import", tarPath); err != nil {
			t.Fatalf("import %s: %v %s", img.ref, err, out)
		}
	}
	// nagare's image the way a user makes it (deploy/README.md).
	img := exec.Command(filepath.Join(c.repoRoot, "scripts/k8s/image.sh"), c.path("nagare-image.tar"), c.ctrSock)
	if out, err := img.CombinedOutput(); err != nil {
		t.Fatalf("scripts/k8s/image.sh: %v\n%s", err, out)
	}
	c.logf("images imported: pause:local, busybox:local, nagare:dev")
}

func (c *cluster) kubelet() {
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failSwapOn: false
makeIPTablesUtilChains: false
protectKernelDefaults: false
address: 127.0.0.1
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://%s
imageServiceEndpoint: unix://%s
resolvConf: /etc/resolv.conf
serializeImagePulls: false
podLogsDir: %s
evictionHard: {}
`, c.ctrSock, c.ctrSock, c.path("pod-logs"))
	if err := os.WriteFile(c.path("kubelet.yaml"), []byte(cfg), 0o644); err != nil {
		c.t.Fatal(err)
	}
	c.start("kubelet", filepath.Join(k8sDir(), "kubelet"), "--kubeconfig="+c.path("kubelet.kubeconfig"),
		"--config="+c.path("kubelet.yaml"), "--hostname-override="+c.node,
		"--root-dir="+c.path("kubelet"), "--cert-dir="+c.path("kubelet-pki"))
	c.waitFor("node registered with a pod CIDR", 90*time.Second, func() error {
		out, err := c.kubectl("get", "node", c.node, "-o", "jsonpath={.spec.podCIDR}")
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) == "" {
			return fmt.Errorf("no podCIDR yet")
		}
		return nil
	})
}

// binder stands in for kube-scheduler, which this harness does not run:
// DaemonSet pods arrive with a node affinity but no node, and the only node
// they can go to is this one, so it binds every pending pod to it. Test
// pods name their node themselves.
func (c *cluster) binder() {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubecfg)
	if err != nil {
		c.t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.stopBinder = cancel
	go func() {
		for ctx.Err() == nil {
			pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName="})
			if err == nil {
				for _, p := range pods.Items {
					if !affinityAllows(&p, c.node) {
						continue // a DaemonSet pod for another (API-only) node
					}
					b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID},
						Target: corev1.ObjectReference{Kind: "Node", Name: c.node}}
					if err := cs.CoreV1().Pods(p.Namespace).Bind(ctx, b, metav1.CreateOptions{}); err == nil {
						c.logf("bound %s/%s to %s", p.Namespace, p.Name, c.node)
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
}

// affinityAllows says whether pod may run on node as far as its required
// node affinity goes: a DaemonSet pod names its node with a metadata.name
// field term, and a pod for a Node object the test made without a kubelet
// must stay pending, not run here as a second copy of the DaemonSet.
func affinityAllows(p *corev1.Pod, node string) bool {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		ok := true
		for _, f := range term.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && !slices.Contains(f.Values, node) {
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// down deletes the pods (so CNI DEL runs), stops everything by PID in
// reverse order, and restores what kubelet and nagare changed on the host.
func (c *cluster) down() {
	if c.stopBinder != nil {
		c.stopBinder()
	}
	if c.t.Failed() {
		for _, n := range []string{"kubelet", "containerd"} {
			b, _ := os.ReadFile(c.path("logs", n+".log"))
			lines := strings.Split(string(b), "\n")
			if len(lines) > 30 {
				lines = lines[len(lines)-30:]
			}
			c.t.Logf("--- %s log (tail) ---\n%s", n, strings.Join(lines, "\n"))
		}
		logs, _ := filepath.Glob(c.path("pod-logs", "kube-system_nagare-*", "*", "*.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			lines := strings.Split(string(b), "\n")
			if len(lines) > 40 {
				lines = lines[len(lines)-40:]
			}
			c.t.Logf("--- %s ---\n%s", l, strings.Join(lines, "\n"))
		}
		for _, args := range [][]string{
			{"get", "events", "-A", "--sort-by=.lastTimestamp"},
			{"-n", "kube-system", "describe", "ds/nagare"},
		} {
			out, err := c.kubectl(args...)
			c.t.Logf("--- kubectl %s ---\n%s %v", strings.Join(args, " "), out, err)
		}
	}
	if c.kubecfg != "" {
		_, _ = c.kubectl("delete", "pods", "--all", "--grace-period=0", "--force", "--timeout=30s")
		// A forced delete returns before the kubelet has stopped the
		// sandboxes: wait for their CNI DELs to reach the agent (while it
		// still runs), or the pods' veths and namespaces outlive the test.
		_ = poll(60*time.Second, 200*time.Millisecond, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if st, err := c.agentStatus(ctx); err == nil && len(st.Pods) > 0 {
				return fmt.Errorf("%d pods attached", len(st.Pods))
			}
			return nil // none left, or no agent to ask
		})
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		stopGroup(p, 15*time.Second)
		if strings.HasSuffix(p.Args[0], "kubelet") {
			// Containers outlive the kubelet, and their processes outlive
			// their shims: kill every task while containerd still runs.
			c.killTasks()
		}
		if p.Args[0] == "containerd" || strings.HasSuffix(p.Args[0], "kubelet") {
			// Shims outlive a stopped containerd; stop them too.
			killShims(c.dir)
		}
	}
	// Any process still running in a container of this cluster (its root
	// is a rootfs under the test's directory) is a leak; kill it and say so.
	if leaked := processesRootedIn(c.dir); len(leaked) > 0 {
		for _, pid := range leaked {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		c.t.Errorf("container processes outlived the cluster: %v", leaked)
	}
	// nagare's node-wide state on the host (the DaemonSet ran on the host network).
	// Devices and tables only: the CNI files and the IPAM database are
	// the test directory's (--keep-cni, no --node-name).
	bin := c.path("nagare-bin")
	for _, args := range [][]string{
		{filepath.Join(bin, "nagare-agent"), "cleanup", "--keep-cni", "--node-name", ""},
		{filepath.Join(bin, "nagare-switch"), "--bridge", "br-int", "--run-dir", c.path("nagare-run"), "--destroy"},
	} {
		if _, err := os.Stat(args[0]); err != nil {
			break // nagare never ran (upAPIServer)
		}
		if out, err := run(args...); err != nil {
			c.t.Errorf("cleanup: %v %s", err, out)
		}
	}
	for s, v := range c.sysctls {
		_ = os.WriteFile("/proc/sys/"+s, []byte(v), 0o644)
	}
	// Every mount the kubelet and containerd made under the test's
	// directory (rootfs, shm, secrets), deepest first.
	mounts := mountsUnder(c.dir)
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := unix.Unmount(mounts[i], unix.MNT_DETACH); err != nil {
			c.t.Errorf("unmount %s: %v", mounts[i], err)
		}
	}
	for _, p := range c.hostMade {
		if strings.HasPrefix(p, "/sys/fs/cgroup/") {
			removeCgroupTree(p)
		} else {
			_ = os.RemoveAll(p)
		}
	}
	if !c.t.Failed() || os.Getenv("NAGARE_K8S_KEEP") == "" {
		_ = os.RemoveAll(c.dir)
	}
	if left := c.before.leftovers(snapshotHost()); len(left) > 0 {
		c.t.Errorf("the test left on the host: %s", strings.Join(left, "; "))
	}
}

// hostState is what the test may change on the machine and must restore:
// network devices, named network namespaces (the runtime's cni-*), the
// fast path's BPF pins and the agent's nftables table.
type hostState struct {
	links, netns, pins []string
	nat                bool
}

func snapshotHost() hostState {
	var h hostState
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		h.links = append(h.links, i.Name)
	}
	for _, d := range []struct {
		dir string
		out *[]string
	}{{"/run/netns", &h.netns}, {"/sys/fs/bpf/nagare", &h.pins}} {
		ents, _ := os.ReadDir(d.dir)
		for _, e := range ents {
			*d.out = append(*d.out, e.Name())
		}
	}
	rules, err := snat.Describe("")
	h.nat = err == nil && rules != nil
	return h
}

// leftovers lists what after has that h had not.
func (h hostState) leftovers(after hostState) []string {
	var out []string
	// Namespaces and pins of other names belong to other tests, not to
	// the runtime's pods or the DaemonSet's br-int.
	for _, d := range []struct {
		what, prefix  string
		before, after []string
	}{{"link", "", h.links, after.links}, {"netns", "cni-", h.netns, after.netns}, {"BPF pins", "br-int-", h.pins, after.pins}} {
		for _, n := range d.after {
			if strings.HasPrefix(n, d.prefix) && !slices.Contains(d.before, n) {
				out = append(out, d.what+" "+n)
			}
		}
	}
	if after.nat && !h.nat {
		out = append(out, "nftables table ip "+snat.TableName)
	}
	return out
}

// stopGroup stops a process started in a group of its own: SIGTERM to
// the group, SIGKILL after grace, and waits for it.
func stopGroup(p *exec.Cmd, grace time.Duration) {
	_ = syscall.Kill(-p.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// killTasks kills every container task of the cluster through containerd
// (SIGKILL) and waits for them to go.
func (c *cluster) killTasks() {
	out, err := c.ctr("tasks", "ls", "-q")
	if err != nil {
		return
	}
	for _, id := range strings.Fields(out) {
		_, _ = c.ctr("tasks", "kill", "-a", "-s", "SIGKILL", id)
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) && len(processesRootedIn(c.dir)) > 0 {
		time.Sleep(100 * time.Millisecond)
	}
}

// mountsUnder lists the mount points below dir, in mount order.
func mountsUnder(dir string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	return out
}

// procPIDs lists the processes of this host for which keep says true.
func procPIDs(keep func(pid int) bool) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && keep(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// processesRootedIn lists the processes whose root directory lies under
// dir (container processes of this cluster).
func processesRootedIn(dir string) []int {
	return procPIDs(func(pid int) bool {
		root, err := os.Readlink(fmt.Sprintf("/proc/%d/root", pid))
		if err != nil || !strings.HasPrefix(root, dir+"/") {
			return false
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return err != nil || !strings.Contains(string(st), ") Z ") // not a zombie waiting for its reaper
	})
}

// killShims kills containerd-shim processes started for this cluster.
func killShims(state string) {
	shims := procPIDs(func(pid int) bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		return err == nil && strings.Contains(string(b), "containerd-shim") && strings.Contains(string(b), state)
	})
	for _, pid := range shims {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func execCommand(args ...string) *exec.Cmd { return exec.Command(args[0], args[1:]...) }
