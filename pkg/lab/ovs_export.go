package lab

import "context"

// OVS is an Open vSwitch instance (ovsdb-server + ovs-vswitchd) for
// programs outside the lab that compare nagare with it (test/ctdiff): the
// same daemons, files and teardown as the lab's ovs-* data planes.
type OVS struct{ o *ovsInstance }

// OVSAvailable reports, wrapping ErrNotAvailable, why Open vSwitch cannot
// run here (a missing daemon, tool or schema).
func OVSAvailable() error { return ovsAvailable() }

// StartOVS starts Open vSwitch in network namespace ns with every file
// (database, sockets, pidfiles, logs) in dir. c stops both daemons; sh
// runs and logs the commands.
func StartOVS(ctx context.Context, sh *Shell, c *Cleanup, dir, ns string, otherConfig ...string) (*OVS, error) {
	o, err := startOVSIn(ctx, sh, c, dir, ns, otherConfig...)
	if err != nil {
		return nil, err
	}
	return &OVS{o: o}, nil
}

// Dir is the instance's directory; a bridge B's OpenFlow management
// socket is Dir()/B.mgmt.
func (x *OVS) Dir() string { return x.o.dir }

// Vsctl runs ovs-vsctl against the instance's database.
func (x *OVS) Vsctl(ctx context.Context, args ...string) (string, error) {
	return x.o.vsctl(ctx, args...)
}

// Appctl runs ovs-appctl against the instance's ovs-vswitchd.
func (x *OVS) Appctl(ctx context.Context, args ...string) (string, error) {
	return x.o.appctl(ctx, args...)
}
