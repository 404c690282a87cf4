package switchd

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/flow"
)

// TestLearningRevalidatesOnlyDependents: a new address on a NORMAL bridge
// re-translates only the cached flows whose NORMAL lookups it changes (the
// flood to that address), not every cached flow.
func TestLearningRevalidatesOnlyDependents(t *testing.T) {
	sw := idleSwitch(t, nil)
	addFlow(t, sw, "table=0,priority=0,actions=NORMAL")
	mac := func(s string) [6]byte {
		hw, err := net.ParseMAC(s)
		if err != nil {
			t.Fatal(err)
		}
		return [6]byte(hw)
	}
	key := func(in uint32, src, dst string) flow.Key {
		return flow.Key{InPort: in, EthType: 0x0800, EthSrc: mac(src), EthDst: mac(dst), NwProto: 17, NwTTL: 64}
	}
	peer, unknown := "02:00:00:00:ff:01", "02:00:00:00:ff:02"
	if _, err := sw.translate(key(2, peer, "ff:ff:ff:ff:ff:ff"), false); err != nil { // learn peer on 2
		t.Fatal(err)
	}
	const n = 200
	var keys []flow.Key
	for i := 0; i < n; i++ {
		keys = append(keys, key(1, fmt.Sprintf("02:00:00:00:%02x:%02x", i>>8, i&0xff), peer))
	}
	keys = append(keys, key(1, "02:00:00:00:00:00", unknown)) // flooded: unknown is not learned
	var fs []flow.Flow
	var uks []*ukey
	for _, k := range keys {
		x, err := sw.translate(k, false)
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, flow.Flow{Key: k.And(x.mask), Mask: x.mask, Actions: x.actions})
		uks = append(uks, &ukey{packet: k, mask: x.mask, actions: x.actions, rules: x.Rules, macDeps: x.MACDeps, version: x.version, created: time.Now()})
	}
	ids, errs := make([]uint32, len(fs)), make([]error, len(fs))
	sw.dp.InstallBatch(fs, ids, errs)
	for i := range fs {
		if errs[i] != nil {
			t.Fatalf("flow %d: %v", i, errs[i])
		}
		sw.cache.set(ids[i], uks[i])
	}
	sw.rv.round() // settle
	before := sw.rv.stats()

	// An address no cached flow looked up: nothing to translate again.
	if _, err := sw.translate(key(2, "02:00:00:00:ff:03", "ff:ff:ff:ff:ff:ff"), false); err != nil {
		t.Fatal(err)
	}
	sw.rv.round()
	st := sw.rv.stats()
	if got := st.Revalidated - before.Revalidated; got != 0 {
		t.Fatalf("learning an unrelated address re-translated %d of %d cached flows", got, len(keys))
	}
	if got := st.MACSkipped - before.MACSkipped; got != uint64(len(keys)) {
		t.Fatalf("skipped %d flows, want %d", got, len(keys))
	}
	// The flooded destination appears: its flood, and only it, is checked.
	before = st
	if _, err := sw.translate(key(2, unknown, "ff:ff:ff:ff:ff:ff"), false); err != nil {
		t.Fatal(err)
	}
	sw.rv.round()
	st = sw.rv.stats()
	if got := st.Revalidated - before.Revalidated; got != 1 {
		t.Fatalf("learning the flooded address re-translated %d cached flows, want 1", got)
	}
	// A table change still re-translates everything.
	before = st
	addFlow(t, sw, "table=0,priority=5,tcp,actions=drop")
	sw.rv.round()
	if got := sw.rv.stats().Revalidated - before.Revalidated; got != uint64(len(keys)) {
		t.Fatalf("a table change re-translated %d flows, want %d", got, len(keys))
	}
}
