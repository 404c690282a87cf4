package k8s

// One two-node cluster for the tests that need nothing of it but a plain
// cluster (TestTwoNodePodToPod, TestTwoNodeServices, the conformance runs):
// a bring-up is a minute or more on a small machine, and each of them paid
// one. The first of them that runs brings it up (a failure then is that
// test's, and the cluster goes down at once); each gets a copy bound to its
// own *testing.T; when each ends, what it made in the default namespace is
// deleted, so the next finds the cluster as bring-up left it; TestMain
// tears it down once after the last test, with the same host checks as a
// cluster of a test's own, and fails the run if they find anything.
//
// Tests with a cluster of their own (upTwoNodeWith, the single-node
// harness) tear the shared one down first: both hold the same bridge,
// namespaces and addresses, and each one's host checks assume it is alone.

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

var shared struct {
	mu     sync.Mutex
	c      *twoNode // nil: not up
	upFor  string   // the test that brought it up
	users  []string // the tests that used it, in order ("(failed)" after those that failed)
	broken string   // why no later test may use it ("": usable)
	report mainReport
}

// mainReport collects what the shared cluster's teardown finds, for
// TestMain to print and fail the run on.
type mainReport struct {
	errs        []string
	testsFailed bool // a test failed on the cluster: keep its files with NAGARE_K8S_KEEP
}

func (r *mainReport) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *mainReport) Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "shared two-node cluster: %s\n", fmt.Sprintf(format, args...))
}

func (r *mainReport) Failed() bool { return r.testsFailed || len(r.errs) > 0 }

func TestMain(m *testing.M) {
	code := m.Run()
	releaseShared()
	if errs := shared.report.errs; len(errs) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: the shared two-node cluster's teardown found: %s\n", strings.Join(errs, "; "))
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// sharedTwoNode returns the shared cluster, bound to t, bringing it up if
// no test has yet. It fails t at once if the cluster cannot be used: its
// bring-up failed in an earlier test, or it no longer answers.
func sharedTwoNode(t *testing.T) *twoNode {
	t.Helper()
	requireTwoNode(t)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.broken != "" {
		t.Fatalf("the shared two-node cluster cannot be used: %s", shared.broken)
	}
	if shared.c == nil {
		c := newTwoNode(t, twoNodeOptions{})
		up := false
		defer func() {
			if up {
				return
			}
			// t.Fatal in bring-up: down now, reported to t, and no
			// later test tries again (it would fail the same way, a
			// minute or more later).
			shared.broken = "its bring-up failed in " + t.Name()
			if t.Failed() {
				c.dumpLogs(t)
			}
			c.down(t)
		}()
		c.bringUp()
		up = true
		c.t = nil // from here each test's copy has its own
		shared.c, shared.upFor = c, t.Name()
	} else if err := shared.c.healthy(); err != nil {
		shared.broken = fmt.Sprintf("unhealthy after %s: %v", strings.Join(shared.users, ", "), err)
		t.Fatalf("the shared two-node cluster cannot be used: %s", shared.broken)
	} else {
		t.Logf("the shared two-node cluster, up in %v for %s", shared.c.upTime.Round(time.Millisecond), shared.upFor)
	}
	shared.users = append(shared.users, t.Name())
	own := *shared.c
	own.t = t
	t.Cleanup(func() { own.giveBack() })
	return &own
}

// giveBack ends a test's use of the shared cluster: the logs if it failed
// (the cluster as the test left it), then what it made in the default
// namespace is deleted. If that fails, the cluster is broken for the tests
// after.
func (c *twoNode) giveBack() {
	t := c.t
	if t.Failed() {
		c.dumpLogs(t)
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if t.Failed() {
		for i, u := range shared.users {
			if u == t.Name() {
				shared.users[i] += " (failed)"
			}
		}
		shared.report.testsFailed = true
	}
	start := time.Now()
	if err := c.clearDefaultNamespace(); err != nil {
		shared.broken = fmt.Sprintf("%s's objects could not be deleted: %v", t.Name(), err)
		t.Errorf("the shared two-node cluster: %s", shared.broken)
		return
	}
	c.logf("the shared two-node cluster: default namespace cleared in %v", time.Since(start).Round(time.Millisecond))
}

// clearDefaultNamespace deletes the pods and Services the test made (all
// of the default namespace's but the kubernetes Service) and waits for
// both nodes' agents to have let go of the pods: the API server drops a
// pod with a grace period of 0 (the tests' pods) at once, and the kubelet
// stops its sandbox, whose CNI DEL frees its address, afterwards.
func (c *twoNode) clearDefaultNamespace() error {
	if _, err := c.kubectl("-n", "default", "delete", "pods", "--all", "--wait=true",
		"--timeout=90s", "--request-timeout=90s"); err != nil {
		return err
	}
	if _, err := c.kubectl("-n", "default", "delete", "services", "--field-selector", "metadata.name!=kubernetes",
		"--wait=true", "--timeout=60s", "--request-timeout=60s"); err != nil {
		return err
	}
	deadline := time.Now().Add(90 * time.Second)
	for _, n := range c.nodes {
		err := poll(time.Until(deadline), 250*time.Millisecond, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, err := c.agentStatus(ctx, n)
			if err != nil {
				return err
			}
			var left []string
			for _, p := range st.Pods {
				if strings.HasPrefix(p.Pod, "default/") {
					left = append(left, p.Pod)
				}
			}
			if len(left) > 0 {
				return fmt.Errorf("pods still attached: %v", left)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%s's agent: %v", n.name, err)
		}
	}
	return nil
}

// healthy: the API server ready and both nodes Ready (their agents'
// CNI in place), within half a minute.
func (c *twoNode) healthy() error {
	return poll(30*time.Second, time.Second, func() error {
		if _, err := c.kubectl("get", "--raw", "/readyz", "--request-timeout=10s"); err != nil {
			return err
		}
		out, err := c.kubectl("get", "nodes", "--request-timeout=10s", "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}`)
		if err == nil && strings.Count(out, "=True") != len(c.nodes) {
			err = fmt.Errorf("nodes: %s", out)
		}
		return err
	})
}

// releaseShared tears the shared cluster down if it is up; what the
// teardown finds goes to shared.report, which TestMain fails the run on.
// A later sharing test brings a new one up.
func releaseShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.c == nil {
		return
	}
	start := time.Now()
	c := shared.c
	shared.c = nil
	users := strings.Join(shared.users, ", ")
	shared.users = nil
	n := len(shared.report.errs)
	c.down(&shared.report)
	for i := n; i < len(shared.report.errs); i++ {
		shared.report.errs[i] = fmt.Sprintf("%s (cluster brought up for %s, used by %s)", shared.report.errs[i], shared.upFor, users)
	}
	shared.report.testsFailed = false
	shared.report.Logf("torn down in %v (brought up for %s, used by %s)", time.Since(start).Round(time.Millisecond), shared.upFor, users)
}
