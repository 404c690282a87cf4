package cniserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/nagare-net/nagare/internal/nstest"
)

var shimDir string

func TestMain(m *testing.M) {
	code := func() int {
		dir, err := os.MkdirTemp("", "nagare-cni-shim-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		root, _ := filepath.Abs("../../..")
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "nagare-cni"), "./cmd/nagare-cni")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build nagare-cni: %v\n%s", err, out)
			return 1
		}
		shimDir = dir
		return m.Run()
	}()
	os.Exit(code)
}

// testHandler records calls and answers as told.
type testHandler struct {
	mu    sync.Mutex
	calls []Request
	add   func(*Request) (types.Result, error)
	err   error         // for DEL, CHECK, GC, STATUS
	block chan struct{} // non-nil: every call waits on it
}

func (h *testHandler) record(r *Request) error {
	h.mu.Lock()
	h.calls = append(h.calls, *r)
	h.mu.Unlock()
	if h.block != nil {
		<-h.block
	}
	return h.err
}

func (h *testHandler) Add(_ context.Context, r *Request) (types.Result, error) {
	if err := h.record(r); err != nil {
		return nil, err
	}
	if h.add != nil {
		return h.add(r)
	}
	res := &current.Result{CNIVersion: "1.1.0", IPs: []*current.IPConfig{{Address: mustCIDR("10.77.1.9/24"), Gateway: net.ParseIP("10.77.1.1")}}}
	conf, _ := ParseConf(r)
	return res.GetAsVersion(conf.CNIVersion)
}
func (h *testHandler) Del(_ context.Context, r *Request) error    { return h.record(r) }
func (h *testHandler) Check(_ context.Context, r *Request) error  { return h.record(r) }
func (h *testHandler) GC(_ context.Context, r *Request) error     { return h.record(r) }
func (h *testHandler) Status(_ context.Context, r *Request) error { return h.record(r) }

func mustCIDR(s string) net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	n.IP = ip
	return *n
}

// serve starts a server with h on a socket in a temp dir.
// calls records what Serve observed.
type calls struct {
	mu   sync.Mutex
	seen map[string]int
}

func (c *calls) ObserveCall(command string, _ time.Duration, _ uint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[command]++
}

func serve(t *testing.T, h Handler) (string, *calls) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cni.sock")
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	m := &calls{seen: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = Serve(ctx, l, h, slog.New(slog.NewTextHandler(io.Discard, nil)), m); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return sock, m
}

func conflist(sock string, extra string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"nagare","plugins":[{"type":"nagare-cni","socket":%q%s}]}`, sock, extra))
}

func rt(netns string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: "c0ffee", NetNS: netns, IfName: "eth0",
		Args: [][2]string{{"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", "web-1"}}}
}

// TestThroughLibcni drives every command through the real CNI library and
// the built shim.
func TestThroughLibcni(t *testing.T) {
	// The CNI library refuses a plugin whose CNI_NETNS is its own: a pod
	// namespace it is.
	pod := nstest.New(t, "cnipod")
	h := &testHandler{}
	sock, m := serve(t, h)
	cl, err := libcni.ConfListFromBytes(conflist(sock, ""))
	if err != nil {
		t.Fatal(err)
	}
	cni := libcni.NewCNIConfigWithCacheDir([]string{shimDir}, t.TempDir(), nil)
	ctx := context.Background()
	r, err := cni.AddNetworkList(ctx, cl, rt(pod.Path))
	if err != nil {
		t.Fatal(err)
	}
	res, err := current.NewResultFromResult(r)
	if err != nil || len(res.IPs) != 1 || res.IPs[0].Address.String() != "10.77.1.9/24" {
		t.Fatalf("ADD result %v %v", r, err)
	}
	if err := cni.CheckNetworkList(ctx, cl, rt(pod.Path)); err != nil {
		t.Fatal(err)
	}
	if err := cni.GetStatusNetworkList(ctx, cl); err != nil {
		t.Fatal(err)
	}
	if err := cni.GCNetworkList(ctx, cl, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{{ContainerID: "c0ffee", IfName: "eth0"}}}); err != nil {
		t.Fatal(err)
	}
	if err := cni.DelNetworkList(ctx, cl, rt(pod.Path)); err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, c := range h.calls {
		cmds = append(cmds, c.Command)
	}
	if got := strings.Join(cmds, " "); got != "ADD CHECK STATUS GC DEL" {
		t.Fatalf("agent saw %q", got)
	}
	add := h.calls[0]
	if add.ContainerID != "c0ffee" || add.IfName != "eth0" || add.Netns != pod.Path || PodName(add.Args) != "default/web-1" {
		t.Errorf("ADD request %+v", add)
	}
	var gc NetConf
	if err := json.Unmarshal(h.calls[3].Config, &gc); err != nil || len(gc.ValidAttachments) != 1 || gc.ValidAttachments[0].ContainerID != "c0ffee" {
		t.Errorf("GC config %s: %v", h.calls[3].Config, err)
	}
	m.mu.Lock()
	if len(m.seen) != 5 {
		t.Errorf("observed %v, want each of the 5 commands", m.seen)
	}
	m.mu.Unlock()
	// An older config version gets an older result.
	old, _ := libcni.ConfListFromBytes([]byte(fmt.Sprintf(`{"cniVersion":"0.4.0","name":"nagare","plugins":[{"type":"nagare-cni","socket":%q}]}`, sock)))
	r, err = cni.AddNetworkList(ctx, old, rt(pod.Path))
	if err != nil || r.Version() != "0.4.0" {
		t.Fatalf("ADD with cniVersion 0.4.0: %v %v", r, err)
	}
}

// runShim runs the shim with env and stdin and returns its stdout, the
// decoded error (if the output is one) and its exit error.
func runShim(t *testing.T, env map[string]string, stdin []byte) (string, *types.Error, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(shimDir, "nagare-cni"))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdin = bytes.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout = &out
	err := cmd.Run()
	var te types.Error
	if json.Unmarshal(out.Bytes(), &te) == nil && te.Code != 0 {
		return out.String(), &te, err
	}
	return out.String(), nil, err
}

func addEnv() map[string]string {
	return map[string]string{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c0ffee", "CNI_NETNS": "/proc/self/ns/net",
		"CNI_IFNAME": "eth0", "CNI_PATH": shimDir}
}

// TestBadInput: each gets the spec's error JSON on stdout, its code and a
// non-zero exit.
func TestBadInput(t *testing.T) {
	h := &testHandler{}
	sock, _ := serve(t, h)
	good := conflist(sock, "")
	single := func(c []byte) []byte { // the plugin's own config as libcni passes it
		var l struct {
			CNIVersion string            `json:"cniVersion"`
			Name       string            `json:"name"`
			Plugins    []json.RawMessage `json:"plugins"`
		}
		_ = json.Unmarshal(c, &l)
		var p map[string]any
		_ = json.Unmarshal(l.Plugins[0], &p)
		p["cniVersion"], p["name"] = l.CNIVersion, l.Name
		b, _ := json.Marshal(p)
		return b
	}
	without := func(k string) map[string]string { e := addEnv(); delete(e, k); return e }
	cases := []struct {
		name  string
		env   map[string]string
		stdin []byte
		code  uint
	}{
		{"malformed-json", addEnv(), []byte(`{"cniVersion": "1.1.0", "name": `), types.ErrDecodingFailure},
		{"unknown-version", addEnv(), []byte(fmt.Sprintf(`{"cniVersion":"9.9.9","name":"nagare","type":"nagare-cni","socket":%q}`, sock)), types.ErrIncompatibleCNIVersion},
		{"no-container", without("CNI_CONTAINERID"), single(good), types.ErrInvalidEnvironmentVariables},
		{"no-netns", without("CNI_NETNS"), single(good), types.ErrInvalidEnvironmentVariables},
		{"no-ifname", without("CNI_IFNAME"), single(good), types.ErrInvalidEnvironmentVariables},
		{"bad-timeout", addEnv(), single(conflist(sock, `,"timeout":"soon"`)), types.ErrInvalidNetworkConfig},
		{"agent-down", addEnv(), single(conflist(filepath.Join(t.TempDir(), "none.sock"), "")), types.ErrTryAgainLater},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, te, err := runShim(t, c.env, c.stdin)
			if err == nil {
				t.Fatalf("exit 0; stdout %s", out)
			}
			if te == nil || te.Code != c.code || te.Msg == "" {
				t.Fatalf("stdout %q, want a CNI error with code %d", out, c.code)
			}
		})
	}
	// A stale socket file of a dead agent: still "try again later".
	stale := filepath.Join(t.TempDir(), "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	if _, te, _ := runShim(t, addEnv(), single(conflist(stale, ""))); te == nil || te.Code != types.ErrTryAgainLater {
		t.Errorf("stale socket: %+v", te)
	}
	// Errors the agent returns reach the runtime unchanged.
	h.add = func(*Request) (types.Result, error) {
		return nil, types.NewError(100, "no free address in 10.77.1.0/29", "")
	}
	if _, te, _ := runShim(t, addEnv(), single(good)); te == nil || te.Code != 100 || !strings.Contains(te.Msg, "no free address") {
		t.Errorf("agent error: %+v", te)
	}
	h.add = func(*Request) (types.Result, error) { return nil, errors.New("disk on fire") }
	if _, te, _ := runShim(t, addEnv(), single(good)); te == nil || te.Code != types.ErrInternal || !strings.Contains(te.Msg, "disk on fire") {
		t.Errorf("plain agent error: %+v", te)
	}
	h.add = func(*Request) (types.Result, error) { panic("boom") }
	if _, te, _ := runShim(t, addEnv(), single(good)); te == nil || te.Code != types.ErrInternal || !strings.Contains(te.Msg, "panic") {
		t.Errorf("agent panic: %+v", te)
	}
	// Without CNI_COMMAND the plugin says what it is (skel's behaviour).
	cmd := exec.Command(filepath.Join(shimDir, "nagare-cni"))
	cmd.Env = []string{}
	if out, _ := cmd.CombinedOutput(); !strings.Contains(string(out), "nagare-cni") {
		t.Errorf("no CNI_COMMAND: %q", out)
	}
	// VERSION names 1.1.0.
	out, _, err := runShim(t, map[string]string{"CNI_COMMAND": "VERSION"}, []byte(`{"cniVersion":"1.1.0"}`))
	if err != nil || !strings.Contains(out, `"1.1.0"`) {
		t.Errorf("VERSION: %s %v", out, err)
	}
}

// TestHungAgent: an agent that does not answer ends in "try again later"
// within the configured timeout, not a hung runtime.
func TestHungAgent(t *testing.T) {
	h := &testHandler{block: make(chan struct{})}
	sock, _ := serve(t, h)
	defer close(h.block)
	start := time.Now()
	_, te, err := runShim(t, addEnv(), []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"nagare","type":"nagare-cni","socket":%q,"timeout":"1s"}`, sock)))
	if err == nil || te == nil || te.Code != types.ErrTryAgainLater {
		t.Fatalf("hung agent: %+v %v", te, err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the shim waited %v for a hung agent (timeout 1s)", took)
	}
}

func TestSocketSecurity(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	sock := filepath.Join(dir, "cni.sock")
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	st, err := os.Stat(sock)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v %v, want 0600", st.Mode(), err)
	}
	if d, _ := os.Stat(dir); d.Mode().Perm() != 0o700 {
		t.Errorf("socket dir mode %v, want 0700", d.Mode())
	}
	// A live agent's socket is not stolen.
	if _, err := Listen(sock); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("second Listen on a live socket: %v", err)
	}
}

func TestInstall(t *testing.T) {
	bin, conf := t.TempDir(), t.TempDir()
	if err := Install([]string{filepath.Join(shimDir, "nagare-cni")}, bin, conf, DefaultConflist("/run/x.sock", false)); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(bin, "nagare-cni"))
	if err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("installed plugin: %v %v", st, err)
	}
	b, err := os.ReadFile(filepath.Join(conf, ConflistName))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := libcni.ConfListFromBytes(b)
	if err != nil || cl.Name != "nagare" || cl.CNIVersion != ConflistVersion || len(cl.Plugins) != 1 || cl.Plugins[0].Network.Type != "nagare-cni" {
		t.Fatalf("conflist %s: %v", b, err)
	}
	// With portmap chained: both binaries, portmap second with its capability.
	pm := filepath.Join(t.TempDir(), "portmap")
	if err := os.WriteFile(pm, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Install([]string{filepath.Join(shimDir, "nagare-cni"), pm}, bin, conf, DefaultConflist("/run/x.sock", true)); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(bin, "portmap")); err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("installed portmap: %v %v", st, err)
	}
	b, _ = os.ReadFile(filepath.Join(conf, ConflistName))
	cl, err = libcni.ConfListFromBytes(b)
	if err != nil || len(cl.Plugins) != 2 || cl.Plugins[1].Network.Type != "portmap" || !cl.Plugins[1].Network.Capabilities["portMappings"] {
		t.Fatalf("conflist with portmap %s: %v", b, err)
	}
	left, _ := filepath.Glob(filepath.Join(bin, ".*tmp*"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestPodName(t *testing.T) {
	for args, want := range map[string]string{
		"IgnoreUnknown=1;K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=dns-1;K8S_POD_INFRA_CONTAINER_ID=abc": "kube-system/dns-1",
		"K8S_POD_NAME=x": "/x",
		"":               "",
	} {
		if got := PodName(args); got != want {
			t.Errorf("PodName(%q) = %q, want %q", args, got, want)
		}
	}
}

// TestResetAgent: an agent that drops the call (it stopped or restarted:
// the connection is reset) is a "try again later" that says so, not "did
// not answer in time"; a hung one still says that.
func TestResetAgent(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "reset.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			// Read the request, then close with unread data in the
			// socket: the kernel resets the peer.
			_, _ = c.Read(make([]byte, 1))
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = Call(ctx, sock, &Request{Command: "ADD"})
	var te *types.Error
	if !errors.As(err, &te) || te.Code != types.ErrTryAgainLater || strings.Contains(te.Msg, "in time") ||
		!(strings.Contains(te.Msg, "reset") || strings.Contains(te.Msg, "closed the connection")) {
		t.Fatalf("reset agent: %v", err)
	}
	t.Log(te.Msg)
}
