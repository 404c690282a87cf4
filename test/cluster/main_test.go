// Package cluster tests nagare as a CNI on a namespace cluster: real
// nagare-switch and nagare-agent processes per node, pods attached by the
// real nagare-cni through the CNI library, real traffic between them.
package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/agent/config"
	"github.com/nagare-net/nagare/pkg/nscluster"
)

var bins nscluster.Binaries

func TestMain(m *testing.M) {
	code := func() int {
		if os.Geteuid() == 0 && !testingShort() {
			dir, err := os.MkdirTemp("", "nagare-cluster-bin-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer os.RemoveAll(dir)
			root, _ := filepath.Abs("../..")
			cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/nagare-switch", "./cmd/nagare-agent", "./cmd/nagare-cni")
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
				return 1
			}
			bins = nscluster.Binaries{Switch: filepath.Join(dir, "nagare-switch"), Agent: filepath.Join(dir, "nagare-agent"), CNI: filepath.Join(dir, "nagare-cni")}
		}
		return m.Run()
	}()
	os.Exit(code)
}

func testingShort() bool {
	for _, a := range os.Args {
		if a == "-test.short" || a == "-test.short=true" {
			return true
		}
	}
	return false
}

var clusterSeq int

// newCluster builds and starts a namespace cluster for t.
func newCluster(t *testing.T, cc *config.Cluster, agentArgs ...string) *nscluster.Cluster {
	t.Helper()
	return newClusterWith(t, func(o *nscluster.Options) { o.Cluster, o.AgentArgs = cc, agentArgs })
}

// newClusterWith is newCluster with options set by shape (DPU mode).
func newClusterWith(t *testing.T, shape func(*nscluster.Options)) *nscluster.Cluster {
	t.Helper()
	nstest.RequireRoot(t)
	if bins.Agent == "" {
		t.Skip("binaries not built")
	}
	clusterSeq++
	opt := nscluster.Options{Prefix: fmt.Sprintf("ct%d-%d", os.Getpid(), clusterSeq), Bin: bins, Dir: t.TempDir(), Logf: t.Logf}
	shape(&opt)
	c, err := nscluster.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range c.Nodes {
				for _, what := range []string{"agent", "switch"} {
					b, _ := os.ReadFile(filepath.Join(n.Dir, what+".log"))
					t.Logf("--- %s %s log (tail) ---\n%s", n.Config.Name, what, tailLines(string(b), 40))
				}
			}
		}
		if err := c.Close(); err != nil {
			t.Log("cleanup:", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
