package lab

import (
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
	"path/filepath"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// kubeAPI is a Kubernetes API server of the lab's own (etcd from Debian,
// the cached kube-apiserver), the source of the Service and EndpointSlice
// objects every Service proxy of a run reads: nagare's agent and
// kube-proxy alike. It runs inside the first node's namespace, listening
// on that namespace's loopback only (127.0.0.1:6443 and :2379 there are
// nobody else's: the real-Kubernetes tests' fixed ports are on the
// host's loopback), with its certificates in the run's temp directory;
// both processes are registered with the run's cleanup.
type kubeAPI struct {
	NS         string // network namespace it listens in
	Dir        string
	Kubeconfig string // admin token, for kube-proxy and nagare-agent (run in NS)
	Client     kubernetes.Interface
}

// Where the API server listens, inside its namespace.
const (
	kubeAPIPort      = "6443"
	kubeEtcdPort     = "2379"
	kubeEtcdPeerPort = "2380"
	// kubeServiceCIDR is the ClusterIP range (10.96.0.1 is the API
	// server's own "kubernetes" Service).
	kubeServiceCIDR = "10.96.0.0/16"
	kubeAdminToken  = "lab-admin-token"
)

// KubeBinDir holds the Kubernetes binaries (kube-apiserver, kube-proxy):
// $NAGARE_K8S_BIN, else the cache make k8s-deps fills.
func KubeBinDir() string {
	if d := os.Getenv("NAGARE_K8S_BIN"); d != "" {
		return d
	}
	return "/var/cache/nagare/k8s/v1.33.13"
}

// kubeBinary is one Kubernetes binary, or an error that says how to get it.
func kubeBinary(name string) (string, error) {
	p := filepath.Join(KubeBinDir(), name)
	if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
		return "", notAvailable("no %s (make k8s-deps builds it into %s)", p, KubeBinDir())
	}
	return p, nil
}

// kubeAPIAvailable says whether a run can start its API server.
func kubeAPIAvailable() error {
	if _, err := kubeBinary("kube-apiserver"); err != nil {
		return err
	}
	if m := MissingTools("etcd"); len(m) > 0 {
		return notAvailable("missing %s", m[0])
	}
	return nil
}

// KubeAPI starts the run's API server on first use (in the first node's
// namespace) and returns it.
func (t *Topology) KubeAPI(ctx context.Context) (*kubeAPI, error) {
	if t.kubeAPI != nil {
		return t.kubeAPI, nil
	}
	a, err := startKubeAPI(ctx, t, t.Nodes[0].NS)
	if err != nil {
		return nil, fmt.Errorf("Kubernetes API server: %w", err)
	}
	t.kubeAPI = a
	return a, nil
}

func startKubeAPI(ctx context.Context, t *Topology, netns string) (*kubeAPI, error) {
	apiserver, err := kubeBinary("kube-apiserver")
	if err != nil {
		return nil, err
	}
	a := &kubeAPI{NS: netns, Dir: filepath.Join(t.TempDir, "kube-api")}
	if err := os.MkdirAll(a.Dir, 0o700); err != nil {
		return nil, err
	}
	if err := writeKubePKI(a.Dir); err != nil {
		return nil, err
	}
	p := func(name string) string { return filepath.Join(a.Dir, name) }
	a.Kubeconfig = p("admin.kubeconfig")
	if err := os.WriteFile(a.Kubeconfig, []byte(kubeconfigFor("https://127.0.0.1:"+kubeAPIPort, p("ca.crt"), kubeAdminToken)), 0o600); err != nil {
		return nil, err
	}
	local := "http://127.0.0.1:" + kubeEtcdPort
	etcd, err := t.Sh.Start(t.Cleanup, "ready to serve client requests", "ip", "netns", "exec", netns,
		"etcd", "--data-dir", p("etcd"), "--listen-client-urls", local, "--advertise-client-urls", local,
		"--listen-peer-urls", "http://127.0.0.1:"+kubeEtcdPeerPort, "--initial-advertise-peer-urls", "http://127.0.0.1:"+kubeEtcdPeerPort,
		"--initial-cluster", "default=http://127.0.0.1:"+kubeEtcdPeerPort, "--quota-backend-bytes", "4294967296")
	if err != nil {
		return nil, err
	}
	if err := etcd.WaitReady(ctx, 60*time.Second); err != nil {
		return nil, err
	}
	api, err := t.Sh.Start(t.Cleanup, "", "ip", "netns", "exec", netns, apiserver,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+kubeAPIPort,
		"--etcd-servers="+local, "--token-auth-file="+p("tokens.csv"), "--client-ca-file="+p("ca.crt"),
		"--tls-cert-file="+p("apiserver.crt"), "--tls-private-key-file="+p("apiserver.key"),
		"--authorization-mode=RBAC", "--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+p("sa.pub"), "--service-account-signing-key-file="+p("sa.key"),
		"--service-cluster-ip-range="+kubeServiceCIDR, "--endpoint-reconciler-type=none",
		"--cert-dir="+p("pki"), "--max-requests-inflight=2000", "--max-mutating-requests-inflight=1000")
	if err != nil {
		return nil, err
	}
	cfg := &rest.Config{Host: "https://127.0.0.1:" + kubeAPIPort, BearerToken: kubeAdminToken,
		TLSClientConfig: rest.TLSClientConfig{CAFile: p("ca.crt")}, QPS: -1, Burst: 1000,
		// The lab runs in the host namespace; the API server listens in netns.
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialInNetns(ctx, "/var/run/netns/"+netns, network, addr)
		}}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	a.Client = c
	deadline := time.Now().Add(120 * time.Second)
	for {
		var body []byte
		body, err = c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(body) == "ok" {
			break
		}
		if api.Exited() {
			return nil, fmt.Errorf("kube-apiserver exited: %s", lastLines(api.Output(), 5))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("kube-apiserver not ready after 120 s: %v: %s", err, lastLines(api.Output(), 5))
		}
		time.Sleep(250 * time.Millisecond)
	}
	// The default namespace is made by the API server itself, a moment
	// after /readyz.
	for {
		_, err := c.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("namespace default: %w", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Sh.logf("# Kubernetes API server up in %s (127.0.0.1:%s), kubeconfig %s", netns, kubeAPIPort, a.Kubeconfig)
	return a, nil
}

// CreateNode makes a Node object (no kubelet: a name, its pod CIDR and
// its address), as nagare-agent --kubernetes needs for its own node.
func (a *kubeAPI) CreateNode(ctx context.Context, name, podCIDR, addr string) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Spec:   corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: addr}}}}
	created, err := a.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("node %s: %w", name, err)
	}
	// Status is a subresource: the create drops it.
	created.Status = n.Status
	if _, err := a.Client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("node %s status: %w", name, err)
	}
	return nil
}

// dialInNetns dials addr from inside the network namespace at path (the
// socket keeps that namespace).
func dialInNetns(ctx context.Context, path, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

func kubeconfigFor(server, caFile, token string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster: {server: %q, certificate-authority: %q}
users:
- name: admin
  user: {token: %q}
contexts:
- name: lab
  context: {cluster: lab, user: admin}
current-context: lab
`, server, caFile, token)
}

// writeKubePKI makes a CA, the API server's serving certificate (for
// 127.0.0.1), the service account keys and the token file, valid for a
// day, into dir.
func writeKubePKI(dir string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nagare-lab-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	srvKeyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name, typ string
		der       []byte
	}{
		{"ca.crt", "CERTIFICATE", caDER}, {"apiserver.crt", "CERTIFICATE", srvDER}, {"apiserver.key", "EC PRIVATE KEY", srvKeyDER},
		{"sa.key", "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)}, {"sa.pub", "PUBLIC KEY", saPub},
	} {
		if err := os.WriteFile(filepath.Join(dir, f.name), pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(kubeAdminToken+",admin,admin,system:masters\n"), 0o600)
}
