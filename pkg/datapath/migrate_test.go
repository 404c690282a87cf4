package datapath

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/nagare-net/nagare/internal/nstest"
)

// migrationPair is podPair with an uplink too (a port attached with a
// pinned tcx link, which a migration moves) and the ports cross-connected.
func migrationPair(t *testing.T) (a, b nstest.NS, d *Datapath) {
	t.Helper()
	n, a, b, d := podPair(t)
	n.IP(t, "link", "add", "up0", "type", "veth", "peer", "name", "up0p")
	if _, err := d.AttachPort("up0", 3, PortUplink); err != nil {
		t.Fatal(err)
	}
	crossConnect(t, d, 1, 2)
	return a, b, d
}

// portsRun fails unless every port of d runs d's own ingress program.
func portsRun(t *testing.T, d *Datapath) {
	t.Helper()
	info, err := d.objs.NagarePortIngress.Info()
	if err != nil {
		t.Fatal(err)
	}
	progID, _ := info.ID()
	for _, p := range d.Ports() {
		if got := attachedProgram(t, d, p); got != progID {
			t.Fatalf("port %s runs program %d, this process loaded %d", p.Name, got, progID)
		}
	}
}

// TestMigrateToOtherLimits reopens an instance with other MaxFlows and
// ConntrackMax (maps of other sizes: before migrate.go, Open refused and
// the operator had to destroy the instance) while a UDP stream runs: no
// datagram may be lost, the ports and flows come over, every port runs
// the new programs and the old pins are gone.
func TestMigrateToOtherLimits(t *testing.T) {
	a, b, d := migrationPair(t)
	cfg := d.cfg
	const total = 3000
	stream := nstest.StartUDPStream(t, a, b, "10.1.0.2:7210", total, total/3, 200*time.Microsecond)
	<-stream.Reached
	flowsBefore := len(d.Flows())
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.MaxFlows, cfg.ConntrackMax = 2048, 4096
	d2, err := Open(cfg)
	if err != nil {
		t.Fatalf("reopening with other limits: %v", err)
	}
	defer d2.Destroy()
	t.Log(d2.Migration())
	if d2.Migration() == "" {
		t.Fatal("Open did not migrate")
	}
	if got := len(d2.Flows()); got != flowsBefore {
		t.Fatalf("migrated instance sees %d flows, had %d", got, flowsBefore)
	}
	if got := len(d2.Ports()); got != 3 {
		t.Fatalf("migrated instance sees %d ports, want 3", got)
	}
	if got := d2.objs.Megaflows.MaxEntries(); got != 2048 {
		t.Fatalf("megaflows holds %d, want the new 2048", got)
	}
	portsRun(t, d2)
	if _, err := os.Stat(d2.oldDir()); !os.IsNotExist(err) {
		t.Fatalf("old instance left behind: %v", err)
	}
	if got := stream.Wait(); got != total {
		t.Fatalf("received %d of %d datagrams across the migration", got, total)
	}
	// The same build again: a plain restart, no migration.
	if err := d2.Close(); err != nil {
		t.Fatal(err)
	}
	d3, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if d3.Migration() != "" || len(d3.Flows()) != flowsBefore {
		t.Fatalf("restart after the migration: %q, %d flows", d3.Migration(), len(d3.Flows()))
	}
	d3.Close()
}

// setLayouts makes this process a build of other layouts until the test ends.
func setLayouts(t *testing.T, dp, ct uint32) {
	t.Helper()
	oldDP, oldCT := dpLayout, ctLayoutVersion
	dpLayout, ctLayoutVersion = dp, ct
	t.Cleanup(func() { dpLayout, ctLayoutVersion = oldDP, oldCT })
}

// TestMigrateAcrossLayouts makes pins with this build's layouts and opens
// them as builds of later ones (the layout constants raised, as the next
// release will): a new fast-path layout drops the megaflow cache and keeps
// the ports; a new conntrack layout without a converter is refused and
// leaves the old instance as it was; with one, the table comes over. Then
// a build of the older layouts meets the newer pins: refused, naming both.
//
// Four loads of the fast path: behind NAGARE_UPGRADE=1 (make
// test-upgrade) with pkg/switchd's upgrade test.
func TestMigrateAcrossLayouts(t *testing.T) {
	if os.Getenv("NAGARE_UPGRADE") != "1" {
		t.Skip("NAGARE_UPGRADE=1 runs the layout migrations (make test-upgrade)")
	}
	_, _, d := migrationPair(t)
	cfg := d.cfg
	oldProg, _ := d.objs.NagarePortIngress.Info()
	oldID, _ := oldProg.ID()
	// d stays open (its namespace thread reads the pods' filters below),
	// as if the old process were still exiting.

	// Conntrack layout 2, no converter: refused, nothing moved.
	setLayouts(t, fastPathLayout, ctLayout+1)
	if _, err := Open(cfg); err == nil || !strings.Contains(err.Error(), "no converter from layout 1") {
		t.Fatalf("conntrack layout 2 without a converter: err %v", err)
	}
	if _, err := os.Stat(d.oldDir()); !os.IsNotExist(err) {
		t.Fatalf("refused migration left %s: %v", d.oldDir(), err)
	}
	for _, p := range d.Ports() {
		if got := attachedProgram(t, d, p); got != oldID {
			t.Fatalf("after a refused migration port %s runs program %d, want the old %d", p.Name, got, oldID)
		}
	}

	// With converters (the identity, standing in for the next release's).
	same := func(k, v []byte) ([]byte, []byte, bool) { return k, v, true }
	converters["conntrack"] = map[uint32]converter{1: same}
	converters["ct_ports"] = map[uint32]converter{1: same}
	converters["ct_released"] = map[uint32]converter{1: same}
	t.Cleanup(func() {
		delete(converters, "conntrack")
		delete(converters, "ct_ports")
		delete(converters, "ct_released")
	})
	d2, err := Open(cfg)
	if err != nil {
		t.Fatalf("conntrack layout 2 with a converter: %v", err)
	}
	if d2.Migration() == "" || len(d2.Flows()) != 2 || len(d2.Ports()) != 3 {
		t.Fatalf("conntrack migration: %q, %d flows, %d ports", d2.Migration(), len(d2.Flows()), len(d2.Ports()))
	}
	portsRun(t, d2)
	d2.Close()

	// The next fast-path layout: the megaflow cache is dropped, the ports stay.
	setLayouts(t, fastPathLayout+1, ctLayout+1)
	d3, err := Open(cfg)
	if err != nil {
		t.Fatalf("fast-path layout %d: %v", fastPathLayout+1, err)
	}
	t.Log(d3.Migration())
	if !strings.Contains(d3.Migration(), "megaflow cache dropped") || len(d3.Flows()) != 0 || len(d3.Ports()) != 3 {
		t.Fatalf("fast-path migration: %q, %d flows, %d ports", d3.Migration(), len(d3.Flows()), len(d3.Ports()))
	}
	portsRun(t, d3)
	var c nagareDpConfig
	if err := d3.objs.Config.Lookup(uint32(0), &c); err != nil || c.Layout != fastPathLayout+1 {
		t.Fatalf("config after migration: layout %d, %v", c.Layout, err)
	}
	newProg, _ := d3.objs.NagarePortIngress.Info()
	newID, _ := newProg.ID()
	d3.Close()

	// Downgrade: this build meets the next one's pins.
	setLayouts(t, fastPathLayout, ctLayout)
	_, err = Open(cfg)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("newer build (fast-path layout %d, conntrack layout %d)", fastPathLayout+1, ctLayout+1)) ||
		!strings.Contains(err.Error(), fmt.Sprintf("writes layouts %d and %d", fastPathLayout, ctLayout)) {
		t.Fatalf("downgrade: err %v, want a refusal naming both layouts", err)
	}
	t.Log(err)
	for _, p := range d.Ports() {
		if got := attachedProgram(t, d, p); got != newID {
			t.Fatalf("after a refused downgrade port %s runs program %d, want %d", p.Name, got, newID)
		}
	}
	// Clean up as the newer build.
	setLayouts(t, fastPathLayout+1, ctLayout+1)
	d4, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d4.Destroy(); err != nil {
		t.Fatal(err)
	}
}

// TestMigrateResumesInterrupted: a switch killed in the middle of a
// migration leaves the old instance aside (DIR-old) and a half-made new
// one; the next Open starts the migration again from the old one.
func TestMigrateResumesInterrupted(t *testing.T) {
	if os.Getenv("NAGARE_UPGRADE") != "1" {
		t.Skip("NAGARE_UPGRADE=1 runs the layout migrations (make test-upgrade)")
	}
	_, _, d := migrationPair(t)
	cfg := d.cfg
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(d.Dir(), d.oldDir()); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(d.Dir()+"/links", 0o700); err != nil { // the half-made new instance
		t.Fatal(err)
	}
	d2, err := Open(cfg)
	if err != nil {
		t.Fatalf("resuming an interrupted migration: %v", err)
	}
	defer d2.Destroy()
	if !strings.Contains(d2.Migration(), "interrupted migration was resumed") || len(d2.Ports()) != 3 || len(d2.Flows()) != 2 {
		t.Fatalf("resumed: %q, %d ports, %d flows", d2.Migration(), len(d2.Ports()), len(d2.Flows()))
	}
	portsRun(t, d2)
	if _, err := os.Stat(d2.oldDir()); !os.IsNotExist(err) {
		t.Fatalf("old instance left behind: %v", err)
	}
}

// TestLayoutStampsStayPut: the layout stamps are where migrate.go reads
// them in pins of any build (dp_config's fourth word, ct_config's last).
func TestLayoutStampsStayPut(t *testing.T) {
	if off := unsafe.Offsetof(nagareDpConfig{}.Layout); off != dpLayoutOffset {
		t.Fatalf("dp_config.layout at offset %d, migrate.go reads %d", off, dpLayoutOffset)
	}
	var c nagareCtConfig
	if off, size := unsafe.Offsetof(c.Layout), unsafe.Sizeof(c); off != size-4 {
		t.Fatalf("ct_config.layout at offset %d of %d bytes: it must be the last word", off, size)
	}
}
