package k8s

// The rolling upgrade and downgrade of nagare's DaemonSet on the two-node
// cluster under traffic (issue 18's first acceptance line): the cluster
// starts on an image of an earlier commit (nagare:prev), a client pod on
// one node keeps a TCP stream and a UDP ping-pong going to a server pod on
// the other node, straight and through a ClusterIP, while `kubectl set
// image` rolls the DaemonSet to the tree's nagare:dev, node by node, and
// back. Each phase is held to: no gap in the ping-pong's answers or the
// stream's bytes over 1 s, no connection reset, every pod keeps its
// address and the pods made during and after the rollout get addresses no
// other pod holds.
//
// The traffic's sockets are the test's own, made inside the pods' network
// namespaces (the pods run agnhost pause): their counters and errors are
// read directly, and a reset is the socket's error, not a parse of a
// tool's output.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// upgradeFrom is the commit nagare:prev is built from by default: main's
// merge of the migration (pkg/datapath/migrate.go), the first commit that
// stamps its pins with layouts — the same stamps as the tree's (fast path
// 1, conntrack 1) — with deploy/ as today. Its binaries differ from
// today's for real: an 8 MiB upcall ring (16 MiB now, so the upgrade
// replaces the pinned ring and the downgrade migrates the instance as one
// of other limits) and no 64 B upcall record tier.
const upgradeFrom = "394badac1e0b18e3c2134b26255508c542713e09"

const maxRolloutGap = time.Second

// TestTwoNodeRollingUpgrade: see the top of this file. NAGARE_K8S_UPGRADE=1
// (make k8s-upgrade); NAGARE_K8S_UPGRADE_FROM names another commit,
// NAGARE_K8S_UPGRADE_PREV_TAR an image tar already built
// (docker.io/library/nagare:prev), NAGARE_K8S_UPGRADE_ROUNDS repeats the
// upgrade and downgrade on one cluster.
func TestTwoNodeRollingUpgrade(t *testing.T) {
	if os.Getenv("NAGARE_K8S_UPGRADE") != "1" {
		t.Skip("NAGARE_K8S_UPGRADE=1 (make k8s-upgrade)")
	}
	requireTwoNode(t)
	rounds := 1
	if v := os.Getenv("NAGARE_K8S_UPGRADE_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("NAGARE_K8S_UPGRADE_ROUNDS=%q", v)
		}
		rounds = n
	}
	prev := prevImage(t)
	c := upTwoNodeWith(t, twoNodeOptions{extraImages: []string{prev}, image: "nagare:prev"})
	c.checkNagareImage("nagare:prev")

	c.apply(strings.Join([]string{
		pausePod("ro-client", c.nodes[0].name, "app: ro-client"),
		pausePod("ro-server", c.nodes[1].name, "app: ro-server"),
		`apiVersion: v1
kind: Service
metadata: {name: ro-echo, namespace: default}
spec:
  selector: {app: ro-server}
  ports:
    - {name: tcp, port: 9002, targetPort: 9002, protocol: TCP}
    - {name: udp, port: 9003, targetPort: 9003, protocol: UDP}
`}, "---\n"))
	c.runningPod("ro-client")
	_, serverIP := c.runningPod("ro-server")
	clusterIP := strings.TrimSpace(c.mustKubectl("get", "svc", "ro-echo", "-o", "jsonpath={.spec.clusterIP}"))
	c.waitFor("an endpoint for ro-echo", time.Minute, func() error {
		out, err := c.kubectl("get", "endpointslices", "-l", "kubernetes.io/service-name=ro-echo", "-o", "jsonpath={.items[*].endpoints[*].addresses[*]}")
		if err == nil && strings.TrimSpace(out) != serverIP.String() {
			err = fmt.Errorf("endpoints %q", out)
		}
		return err
	})
	clientNS, serverNS := c.podNetnsPath("ro-client"), c.podNetnsPath("ro-server")

	var flows []trafficFlow
	for _, f := range []struct {
		name, addr, listen string
	}{
		{"pod->pod", serverIP.String() + ":9000", ":9000"},
		{"ClusterIP", clusterIP + ":9002", ":9002"},
	} {
		s, err := startTCPStream("TCP "+f.name, clientNS, serverNS, f.addr, f.listen)
		c.fatal(err)
		flows = append(flows, s)
	}
	for _, f := range []struct {
		name, addr, listen string
	}{
		{"pod->pod", serverIP.String() + ":9001", ":9001"},
		{"ClusterIP", clusterIP + ":9003", ":9003"},
	} {
		p, err := startPingPong("UDP "+f.name, clientNS, serverNS, f.addr, f.listen)
		c.fatal(err)
		flows = append(flows, p)
	}
	// The control: the same ping-pong on the test's own loopback, through
	// nothing of nagare's. Its longest gap is what the measuring process's
	// own stalls (a loaded machine's scheduling) add to every flow's.
	ctl, err := startPingPong("UDP loopback (control, not nagare)", "", "", "127.0.0.1:39001", "127.0.0.1:39001")
	c.fatal(err)
	flows = append(flows, ctl)
	defer func() {
		for _, f := range flows {
			f.stop()
		}
	}()
	// Every flow answered for a while before anything changes: a flow whose
	// first packets meet a restarting switch is another case
	// (docs/switch.md, Upgrades).
	c.waitFor("traffic flowing", 30*time.Second, func() error {
		for _, f := range flows {
			if s := f.phase(false); s.units < 100 {
				return fmt.Errorf("%s: %d so far", f.name(), s.units)
			}
		}
		return nil
	})
	for _, f := range flows {
		f.phase(true)
	}
	time.Sleep(5 * time.Second) // the steady phase: the same measure with nothing changing
	c.checkPhase("steady", flows)

	before := c.podAddresses()
	made := 0
	for r := 1; r <= rounds; r++ {
		for _, step := range []struct{ phase, image string }{{"upgrade", "nagare:dev"}, {"downgrade", "nagare:prev"}} {
			phase := fmt.Sprintf("%s %d", step.phase, r)
			start := time.Now()
			c.mustKubectl("-n", "kube-system", "set", "image", "daemonset/nagare", "*="+step.image)
			// Pods made while the DaemonSet rolls: their ADDs meet an agent
			// that is stopping, absent or new on one node or the other.
			var mid []string
			for _, n := range c.nodes {
				made++
				name := fmt.Sprintf("ro-mid-%d", made)
				c.apply(pausePod(name, n.name, "app: ro-extra"))
				mid = append(mid, name)
			}
			c.mustKubectl("-n", "kube-system", "rollout", "status", "daemonset/nagare", "--timeout=6m")
			c.waitNagare()
			took := time.Since(start)
			c.checkNagareImage(step.image)
			for _, n := range c.nodes {
				made++
				name := fmt.Sprintf("ro-after-%d", made)
				c.apply(pausePod(name, n.name, "app: ro-extra"))
				mid = append(mid, name)
			}
			for _, name := range mid {
				c.runningPod(name)
			}
			// Whether the ADDs of the pods made mid-rollout met a node
			// without an agent (the runtime retries a failed sandbox).
			failed, _ := c.kubectl("get", "events", "--field-selector", "reason=FailedCreatePodSandBox", "-o", "jsonpath={.items[*].involvedObject.name}")
			c.logf("%s: sandboxes that failed and were retried so far: %q", phase, failed)
			time.Sleep(3 * time.Second) // the flows settle after the last node's agent programmed its switch
			c.logf("%s: rollout to %s took %v", phase, step.image, took.Round(time.Millisecond))
			c.checkPhase(phase, flows)
			after := c.podAddresses()
			if err := sameAddresses(before, after); err != nil {
				t.Errorf("%s: %v", phase, err)
			}
			before = after
			c.logSwitchStart()
		}
	}
}

// prevImage is the tar of nagare:prev: NAGARE_K8S_UPGRADE_PREV_TAR, or
// built from upgradeFrom (NAGARE_K8S_UPGRADE_FROM) by that commit's own
// scripts/k8s/image.sh, in a copy of its tree (git archive) under the
// test's temporary directory.
func prevImage(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("NAGARE_K8S_UPGRADE_PREV_TAR"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	commit := envOr("NAGARE_K8S_UPGRADE_FROM", upgradeFrom)
	root, _ := filepath.Abs("../..")
	src := filepath.Join(t.TempDir(), "src")
	tar := filepath.Join(t.TempDir(), "nagare-prev.tar")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	sh := fmt.Sprintf("git -C %q archive %q | tar -x -C %q", root, commit, src)
	if out, err := exec.Command("sh", "-c", sh).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v %s", sh, err, out)
	}
	for _, args := range [][]string{
		{"go", "generate", "./pkg/datapath/...", "./pkg/agent/vf/...", "./pkg/steering/..."},
		{"scripts/k8s/image.sh", tar},
	} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "NAGARE_IMAGE=docker.io/library/nagare:prev")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nagare:prev from %s: %s: %v\n%s", commit, strings.Join(args, " "), err, out)
		}
	}
	t.Logf("nagare:prev built from %s", commit)
	return tar
}

// pausePod is an agnhost pod on node that does nothing: the test makes
// its sockets in the pod's network namespace.
func pausePod(name, node, labels string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: default, labels: {%s}}
spec:
  nodeSelector: {kubernetes.io/hostname: %s}
  terminationGracePeriodSeconds: 0
  containers:
    - {name: main, image: %s, args: [pause]}
`, name, labels, node, agnhostImage)
}

// podNetnsPath is /proc/PID/ns/net of a process of the pod (its sandbox
// or container): found by the pod's UID in its cgroup path (cgroupfs
// driver: .../pod<UID>/...).
func (c *twoNode) podNetnsPath(pod string) string {
	c.t.Helper()
	uid := strings.TrimSpace(c.mustKubectl("get", "pod", pod, "-o", "jsonpath={.metadata.uid}"))
	if uid == "" {
		c.t.Fatalf("pod %s: no UID", pod)
	}
	pids := procPIDs(func(pid int) bool {
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		return strings.Contains(string(cg), "/pod"+uid+"/")
	})
	if len(pids) == 0 {
		c.t.Fatalf("pod %s: no process in a cgroup of pod %s", pod, uid)
	}
	return fmt.Sprintf("/proc/%d/ns/net", pids[0])
}

// checkNagareImage: every nagare pod runs image (all its containers).
func (c *twoNode) checkNagareImage(image string) {
	c.t.Helper()
	out := c.mustKubectl("-n", "kube-system", "get", "pods", "-l", "app=nagare", "-o",
		`jsonpath={range .items[*]}{.metadata.name}:{range .spec.containers[*]}{.image},{end}{range .spec.initContainers[*]}{.image},{end} {end}`)
	pods := strings.Fields(out)
	if len(pods) != len(c.nodes) {
		c.t.Fatalf("nagare pods: %q, want one per node", out)
	}
	for _, p := range pods {
		_, imgs, _ := strings.Cut(p, ":")
		for _, img := range strings.Split(strings.TrimSuffix(imgs, ","), ",") {
			if img != image {
				c.t.Fatalf("nagare pod %s: image %s, want %s", p, img, image)
			}
		}
	}
}

// logSwitchStart logs what each new switch said of the pins it found (a
// migration) and its warnings and errors, for the report.
func (c *twoNode) logSwitchStart() {
	out, _ := c.kubectl("-n", "kube-system", "get", "pods", "-l", "app=nagare", "-o", "jsonpath={.items[*].metadata.name}")
	for _, p := range strings.Fields(out) {
		logs, _ := c.kubectl("-n", "kube-system", "logs", p, "-c", "nagare-switch")
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, "migrat") || strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN") {
				c.logf("%s switch: %s", p, l)
			}
		}
	}
}

// podAddress is one pod of the pod network.
type podAddress struct{ name, node, ip string }

// podAddresses lists the pods that have an address of the pod network
// (not hostNetwork), by UID; two running pods with one address fail.
func (c *twoNode) podAddresses() map[string]podAddress {
	c.t.Helper()
	out := c.mustKubectl("get", "pods", "-A", "-o",
		`jsonpath={range .items[*]}{.metadata.uid}|{.metadata.namespace}/{.metadata.name}|{.spec.nodeName}|{.status.phase}|{.status.podIP}|{.spec.hostNetwork}{"\n"}{end}`)
	pods := map[string]podAddress{}
	holder := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Split(l, "|")
		if len(f) != 6 || f[3] != "Running" || f[4] == "" || f[5] == "true" {
			continue
		}
		if other, ok := holder[f[4]]; ok {
			c.t.Errorf("address %s given twice: %s and %s", f[4], other, f[1])
		}
		holder[f[4]] = f[1]
		pods[f[0]] = podAddress{name: f[1], node: f[2], ip: f[4]}
	}
	// The agents' own records: one address per pod, none twice.
	for _, n := range c.nodes {
		st, err := c.agentStatus(ctxFor(c.t, 10*time.Second), n)
		c.fatal(err)
		seen := map[string]string{}
		for _, p := range st.Pods {
			if other, ok := seen[p.IP]; ok {
				c.t.Errorf("%s's agent: address %s recorded for %s and %s", n.name, p.IP, other, p.Pod)
			}
			seen[p.IP] = p.Pod
		}
	}
	return pods
}

// sameAddresses: every pod of before that still runs has its address.
func sameAddresses(before, after map[string]podAddress) error {
	var errs []error
	for uid, b := range before {
		if a, ok := after[uid]; ok && a.ip != b.ip {
			errs = append(errs, fmt.Errorf("pod %s: address %s became %s", b.name, b.ip, a.ip))
		}
	}
	return errors.Join(errs...)
}

// checkPhase ends a phase on every flow, logs its numbers and holds them
// to maxRolloutGap, no error, and progress.
func (c *twoNode) checkPhase(phase string, flows []trafficFlow) {
	c.t.Helper()
	for _, f := range flows {
		s := f.phase(true)
		c.logf("%s: %s: longest gap %v (ended %s), %s", phase, f.name(), s.maxGap.Round(time.Millisecond), s.maxAt.Format("15:04:05.000"), s.detail)
		if s.err != nil {
			c.t.Errorf("%s: %s: %v", phase, f.name(), s.err)
		}
		if s.units == 0 {
			c.t.Errorf("%s: %s: nothing got through", phase, f.name())
		}
		if s.maxGap > maxRolloutGap {
			c.t.Errorf("%s: %s: a gap of %v (over %v)", phase, f.name(), s.maxGap.Round(time.Millisecond), maxRolloutGap)
		}
	}
}

// trafficFlow is a stream or a ping-pong running in the background.
type trafficFlow interface {
	name() string
	// phase returns the numbers since the last phase(true); with reset, a
	// new phase starts.
	phase(reset bool) phaseStats
	stop()
}

type phaseStats struct {
	maxGap time.Duration // longest time without progress (a reply, bytes read)
	maxAt  time.Time     // when it ended
	units  int64         // replies, bytes read
	err    error         // the first error of the flow (never reset)
	detail string
}

// gapMeter keeps the longest time between two events of a phase; a gap
// still open when the phase ends counts up to then.
type gapMeter struct {
	mu     sync.Mutex
	last   time.Time
	maxGap time.Duration
	maxAt  time.Time // when the longest gap ended
	units  int64
	err    error
}

func (g *gapMeter) event(n int64) {
	now := time.Now()
	g.mu.Lock()
	if !g.last.IsZero() && now.Sub(g.last) > g.maxGap {
		g.maxGap, g.maxAt = now.Sub(g.last), now
	}
	g.last = now
	g.units += n
	g.mu.Unlock()
}

func (g *gapMeter) fail(err error) {
	g.mu.Lock()
	if g.err == nil {
		g.err = err
	}
	g.mu.Unlock()
}

func (g *gapMeter) phase(reset bool) (time.Duration, int64, error) {
	gap, _, units, err := g.phaseAt(reset)
	return gap, units, err
}

// phaseAt is phase with the time the longest gap ended (now if still open).
func (g *gapMeter) phaseAt(reset bool) (time.Duration, time.Time, int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gap, at := g.maxGap, g.maxAt
	if open := time.Since(g.last); !g.last.IsZero() && open > gap {
		gap, at = open, time.Now()
	}
	units, err := g.units, g.err
	if reset {
		g.maxGap, g.units = 0, 0
	}
	return gap, at, units, err
}

// inNetns runs fn in the network namespace at path ("": the test's
// own); sockets made there keep it.
func inNetns(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	return ns.WithNetNSPath(path, func(ns.NetNS) error { return fn() })
}

// tcpStream: the client writes 16 KiB every 10 ms (1.6 MB/s) on one
// connection; the server side reads and counts. A reset, an EOF, any
// error is the flow's error: the connection is never made again.
type tcpStream struct {
	label          string
	client, server net.Conn
	ln             net.Listener
	gapMeter
	sent, accepts int64
	done          chan struct{}
	wg            sync.WaitGroup
}

func startTCPStream(label, clientNS, serverNS, addr, listen string) (*tcpStream, error) {
	s := &tcpStream{label: label, done: make(chan struct{})}
	if err := inNetns(serverNS, func() (err error) {
		s.ln, err = net.Listen("tcp4", listen)
		return err
	}); err != nil {
		return nil, fmt.Errorf("%s: listen: %w", label, err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		for {
			conn, err := s.ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.accepts++
			s.mu.Unlock()
			select {
			case accepted <- conn:
			default:
				conn.Close() // a second connection: counted, refused
			}
		}
	}()
	if err := inNetns(clientNS, func() (err error) {
		s.client, err = net.DialTimeout("tcp4", addr, 5*time.Second)
		return err
	}); err != nil {
		s.ln.Close()
		return nil, fmt.Errorf("%s: dial %s: %w", label, addr, err)
	}
	select {
	case s.server = <-accepted:
	case <-time.After(5 * time.Second):
		s.client.Close()
		s.ln.Close()
		return nil, fmt.Errorf("%s: nothing accepted", label)
	}
	s.wg.Add(2)
	go func() { // writer
		defer s.wg.Done()
		buf := make([]byte, 16<<10)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-tick.C:
			}
			n, err := s.client.Write(buf)
			s.mu.Lock()
			s.sent += int64(n)
			s.mu.Unlock()
			if err != nil {
				if !closed(s.done) {
					s.fail(fmt.Errorf("write: %w", err))
				}
				return
			}
		}
	}()
	go func() { // reader
		defer s.wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, err := s.server.Read(buf)
			if n > 0 {
				s.event(int64(n))
			}
			if err != nil {
				if !closed(s.done) {
					if errors.Is(err, io.EOF) {
						err = fmt.Errorf("the connection was closed (EOF)")
					}
					s.fail(fmt.Errorf("read: %w", err))
				}
				return
			}
		}
	}()
	return s, nil
}

// closed says whether done, a traffic source's stop signal, is closed.
func closed(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

func (s *tcpStream) name() string { return s.label }

func (s *tcpStream) phase(reset bool) phaseStats {
	gap, at, units, err := s.gapMeter.phaseAt(reset)
	s.mu.Lock()
	sent, accepts := s.sent, s.accepts
	s.mu.Unlock()
	if err == nil && accepts != 1 {
		err = fmt.Errorf("%d connections accepted, want the one", accepts)
	}
	return phaseStats{maxGap: gap, maxAt: at, units: units, err: err,
		detail: fmt.Sprintf("%d bytes read in the phase, %d written in all, one connection", units, sent)}
}

func (s *tcpStream) stop() {
	close(s.done)
	s.client.Close()
	s.server.Close()
	s.ln.Close()
	s.wg.Wait()
}

// pingPong: the client sends a sequence-numbered datagram every 10 ms
// (100/s); the server echoes it; the gap is the longest time between two
// replies.
type pingPong struct {
	label  string
	client *net.UDPConn
	server net.PacketConn
	gapMeter
	sent int64
	done chan struct{}
	wg   sync.WaitGroup
}

func startPingPong(label, clientNS, serverNS, addr, listen string) (*pingPong, error) {
	p := &pingPong{label: label, done: make(chan struct{})}
	if err := inNetns(serverNS, func() (err error) {
		p.server, err = net.ListenPacket("udp4", listen)
		return err
	}); err != nil {
		return nil, fmt.Errorf("%s: listen: %w", label, err)
	}
	raddr, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		p.server.Close()
		return nil, err
	}
	if err := inNetns(clientNS, func() (err error) {
		p.client, err = net.DialUDP("udp4", nil, raddr)
		return err
	}); err != nil {
		p.server.Close()
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	p.wg.Add(3)
	go func() { // server: echo
		defer p.wg.Done()
		buf := make([]byte, 64)
		for {
			n, from, err := p.server.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = p.server.WriteTo(buf[:n], from)
		}
	}()
	go func() { // client: send
		defer p.wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		var seq uint64
		msg := make([]byte, 8)
		for {
			select {
			case <-p.done:
				return
			case <-tick.C:
			}
			seq++
			binary.BigEndian.PutUint64(msg, seq)
			// A send refused (ICMP unreachable met by an earlier one) is
			// a lost round, not an end: the gap meter counts it.
			if _, err := p.client.Write(msg); err == nil {
				p.mu.Lock()
				p.sent++
				p.mu.Unlock()
			}
		}
	}()
	go func() { // client: replies
		defer p.wg.Done()
		buf := make([]byte, 64)
		for {
			n, err := p.client.Read(buf)
			if n == 8 {
				p.event(1)
			}
			if err != nil && closed(p.done) {
				return
			}
		}
	}()
	return p, nil
}

func (p *pingPong) name() string { return p.label }

func (p *pingPong) phase(reset bool) phaseStats {
	p.mu.Lock()
	sent := p.sent
	if reset {
		p.sent = 0
	}
	p.mu.Unlock()
	gap, at, units, err := p.gapMeter.phaseAt(reset)
	return phaseStats{maxGap: gap, maxAt: at, units: units, err: err, detail: fmt.Sprintf("%d of %d answered", units, sent)}
}

func (p *pingPong) stop() {
	close(p.done)
	p.client.Close()
	p.server.Close()
	p.wg.Wait()
}

// TestGapMeter: the longest gap of a phase, one still open at its end
// included, and a new phase starting from nothing.
func TestGapMeter(t *testing.T) {
	var g gapMeter
	g.event(1)
	time.Sleep(30 * time.Millisecond)
	g.event(1)
	gap, units, err := g.phase(true)
	if gap < 30*time.Millisecond || units != 2 || err != nil {
		t.Fatalf("phase 1: gap %v units %d err %v", gap, units, err)
	}
	time.Sleep(50 * time.Millisecond) // open at the phase's end: counted
	gap, units, _ = g.phase(true)
	if gap < 50*time.Millisecond || units != 0 {
		t.Fatalf("phase 2: gap %v units %d, want the open gap and nothing read", gap, units)
	}
	g.fail(errors.New("reset"))
	g.fail(errors.New("later"))
	if _, _, err := g.phase(false); err == nil || err.Error() != "reset" {
		t.Fatalf("err %v, want the first", err)
	}
	if err := sameAddresses(map[string]podAddress{"u1": {"a", "n", "10.78.0.2"}}, map[string]podAddress{"u1": {"a", "n", "10.78.0.3"}}); err == nil {
		t.Fatal("a pod whose address changed was not reported")
	}
}
