package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ovsSchema is where Debian's openvswitch-common puts the database schema.
const ovsSchema = "/usr/share/openvswitch/vswitch.ovsschema"

// ovsInstance is one ovsdb-server + ovs-vswitchd pair of a node, run inside
// the node namespace with every file (database, sockets, pidfiles, logs) in
// its own directory under the run's temp dir, so it never meets the host's
// Open vSwitch or another run's.
type ovsInstance struct {
	dir string
	sh  *Shell
	// VswitchdPID is the ovs-vswitchd daemon's PID.
	VswitchdPID int
}

func ovsAvailable() error {
	if missing := MissingTools("ovs-vswitchd", "ovsdb-server", "ovsdb-tool", "ovs-vsctl", "ovs-appctl"); len(missing) > 0 {
		return notAvailable("missing %s", strings.Join(missing, ", "))
	}
	if _, err := os.Stat(ovsSchema); err != nil {
		return notAvailable("no %s (Debian package openvswitch-common)", ovsSchema)
	}
	return nil
}

func (o *ovsInstance) env() []string {
	return []string{"env", "OVS_RUNDIR=" + o.dir, "OVS_LOGDIR=" + o.dir, "OVS_DBDIR=" + o.dir, "OVS_SYSCONFDIR=" + o.dir}
}

func (o *ovsInstance) daemonArgs(name string) []string {
	return []string{
		"--pidfile=" + filepath.Join(o.dir, name+".pid"),
		"--unixctl=" + filepath.Join(o.dir, name+".ctl"),
		"--log-file=" + filepath.Join(o.dir, name+".log"),
		"--no-chdir", "--detach",
	}
}

// startOVS starts the pair in node n. otherConfig entries (key=value) are
// set in Open_vSwitch other_config before ovs-vswitchd starts.
func startOVS(ctx context.Context, t *Topology, n *Node, otherConfig ...string) (*ovsInstance, error) {
	return startOVSIn(ctx, t.Sh, t.Cleanup, filepath.Join(t.TempDir, "ovs-"+n.Name), n.NS, otherConfig...)
}

// startOVSIn starts the pair in network namespace ns with its files in
// dir; c stops both daemons.
func startOVSIn(ctx context.Context, sh *Shell, c *Cleanup, dir, ns string, otherConfig ...string) (*ovsInstance, error) {
	o := &ovsInstance{dir: dir, sh: sh}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return nil, err
	}
	if _, err := sh.Run(ctx, "ovsdb-tool", "create", filepath.Join(o.dir, "conf.db"), ovsSchema); err != nil {
		return nil, err
	}
	// Registered before starting, so that a daemon whose start was
	// interrupted is still found (by its pidfile) and stopped.
	c.Add("stop ovsdb-server in "+ns, func() error { return o.stopDaemon("ovsdb-server") })
	args := append([]string{"ip", "netns", "exec", ns}, o.env()...)
	args = append(args, "ovsdb-server", filepath.Join(o.dir, "conf.db"), "--remote=punix:"+o.db())
	if _, err := sh.Run(ctx, append(args, o.daemonArgs("ovsdb-server")...)...); err != nil {
		return nil, err
	}
	if _, err := o.vsctl(ctx, "--no-wait", "init"); err != nil {
		return nil, err
	}
	for _, kv := range otherConfig {
		if _, err := o.vsctl(ctx, "--no-wait", "set", "Open_vSwitch", ".", "other_config:"+kv); err != nil {
			return nil, err
		}
	}
	c.Add("stop ovs-vswitchd in "+ns, func() error { return o.stopDaemon("ovs-vswitchd") })
	args = append([]string{"ip", "netns", "exec", ns}, o.env()...)
	args = append(args, "ovs-vswitchd", "unix:"+o.db())
	if _, err := sh.Run(ctx, append(args, o.daemonArgs("ovs-vswitchd")...)...); err != nil {
		return nil, err
	}
	pid, err := o.pid("ovs-vswitchd")
	if err != nil {
		return nil, err
	}
	o.VswitchdPID = pid
	return o, nil
}

func (o *ovsInstance) db() string { return filepath.Join(o.dir, "db.sock") }

// vsctl runs ovs-vsctl against this instance's database.
func (o *ovsInstance) vsctl(ctx context.Context, args ...string) (string, error) {
	return o.sh.Run(ctx, append([]string{"ovs-vsctl", "--timeout=20", "--db=unix:" + o.db()}, args...)...)
}

// appctl runs ovs-appctl against this instance's ovs-vswitchd.
func (o *ovsInstance) appctl(ctx context.Context, args ...string) (string, error) {
	return o.sh.Run(ctx, append([]string{"ovs-appctl", "-t", filepath.Join(o.dir, "ovs-vswitchd.ctl")}, args...)...)
}

func (o *ovsInstance) pid(name string) (int, error) {
	data, err := os.ReadFile(filepath.Join(o.dir, name+".pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(data)))
}

// stopDaemon stops the daemon named by this instance's pidfile, after
// checking that the PID still runs that daemon with this instance's files
// (a stale pidfile must not make us kill a stranger).
func (o *ovsInstance) stopDaemon(name string) error {
	pid, err := o.pid(name)
	if err != nil {
		return nil // never started
	}
	if !o.owns(pid) {
		return nil
	}
	syscall.Kill(pid, syscall.SIGTERM)
	// Ownership is settled; from here wait for the process itself: an
	// exiting process loses its cmdline before it is gone, and owns would
	// call it gone while it still holds its namespace.
	deadline := time.Now().Add(3 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			deadline = time.Now().Add(3 * time.Second)
			for alive(pid) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond) // polling a non-child's exit; nothing to wait on
			}
			if alive(pid) {
				return fmt.Errorf("%s %d survived SIGKILL", name, pid)
			}
			break
		}
		time.Sleep(10 * time.Millisecond) // polling a non-child's exit; nothing to wait on
	}
	return nil
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || !strings.HasPrefix(string(stat[i+1:]), " Z")
}

// owns reports whether pid is alive (not a zombie) and was started with
// this instance's directory on its command line.
func (o *ovsInstance) owns(pid int) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), o.dir) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && strings.HasPrefix(string(stat[i+1:]), " Z") {
		return false
	}
	return true
}

// pmdThreads returns how many PMD (busy-polling) threads ovs-vswitchd runs;
// the plain userspace datapath should have none.
func (o *ovsInstance) pmdThreads() int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", o.VswitchdPID))
	n := 0
	for _, e := range ents {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/comm", o.VswitchdPID, e.Name()))
		if strings.HasPrefix(string(comm), "pmd") {
			n++
		}
	}
	return n
}
