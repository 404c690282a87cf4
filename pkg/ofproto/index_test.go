package ofproto

import (
	"fmt"
	"math/rand"
	"reflect"
	"testing"

	"github.com/nagare-net/nagare/pkg/openflow"
)

func delByCookie(table uint8, cookie, mask uint64) *openflow.FlowMod {
	return &openflow.FlowMod{Command: openflow.FlowDelete, TableID: table, Cookie: cookie, CookieMask: mask,
		BufferID: openflow.NoBuffer, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny}
}

func cookiesLeft(p *Pipeline) []string {
	var out []string
	for _, fs := range p.FlowStats(&openflow.FlowStatsRequest{TableID: openflow.TableAll, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny}) {
		out = append(out, fmt.Sprintf("%d:%#x", fs.TableID, fs.Cookie))
	}
	return out
}

// TestDeleteByCookieAcrossTables: one delete over table_id=ALL with a
// cookie mask takes an object's rules out of every table, leaves the rest,
// and reports them in table then priority order.
func TestDeleteByCookieAcrossTables(t *testing.T) {
	p, _ := newTestPipeline(t, 2)
	mustAdd(t, p,
		"table=0,cookie=0x0400000000000001,priority=5,tcp,actions=output:1",
		"table=3,cookie=0x0400000000000001,priority=9,udp,actions=output:1",
		"table=3,cookie=0x0400000000000001,priority=1,actions=drop",
		"table=5,cookie=0x0300000000000001,priority=1,actions=drop", // same object bits, other feature
		"table=5,cookie=0x0400000000000002,priority=1,tcp,actions=drop",
	)
	rm, err := p.FlowMod(delByCookie(openflow.TableAll, 0x0400000000000001, ^uint64(0)))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rm {
		got = append(got, fmt.Sprintf("%d/%d", r.TableID, r.Priority))
	}
	if want := []string{"0/5", "3/9", "3/1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("removed %v, want %v", got, want)
	}
	if left, want := cookiesLeft(p), []string{"5:0x300000000000001", "5:0x400000000000002"}; !reflect.DeepEqual(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
	// A partial mask: the object bits only, whatever the feature.
	if _, err := p.FlowMod(delByCookie(openflow.TableAll, 0x01, 1<<56-1)); err != nil {
		t.Fatal(err)
	}
	if left, want := cookiesLeft(p), []string{"5:0x400000000000002"}; !reflect.DeepEqual(left, want) {
		t.Errorf("after the partial mask: left %v, want %v", left, want)
	}
	// One table only: the same cookie in another table stays.
	mustAdd(t, p, "table=1,cookie=0x0400000000000002,actions=drop")
	if _, err := p.FlowMod(delByCookie(1, 0x0400000000000002, ^uint64(0))); err != nil {
		t.Fatal(err)
	}
	if left, want := cookiesLeft(p), []string{"5:0x400000000000002"}; !reflect.DeepEqual(left, want) {
		t.Errorf("after the one-table delete: left %v, want %v", left, want)
	}
}

// TestCookieIndexFollowsReplacedRule: an ADD over an identical rule with
// another cookie moves it in the index: the old cookie no longer selects it,
// the new one does.
func TestCookieIndexFollowsReplacedRule(t *testing.T) {
	p, _ := newTestPipeline(t, 2)
	mustAdd(t, p, "table=2,cookie=0x11,priority=7,tcp,actions=output:1")
	// Build the index of this mask before the cookie changes.
	if rm, _ := p.FlowMod(delByCookie(openflow.TableAll, 0x99, ^uint64(0))); len(rm) != 0 {
		t.Fatalf("cookie 0x99 removed %d rules", len(rm))
	}
	mustAdd(t, p, "table=2,cookie=0x22,priority=7,tcp,actions=output:2")
	if rm, _ := p.FlowMod(delByCookie(openflow.TableAll, 0x11, ^uint64(0))); len(rm) != 0 {
		t.Errorf("the old cookie removed %d rules", len(rm))
	}
	// MODIFY by the new cookie reaches it (and keeps the cookie).
	fm := flowMod(t, openflow.FlowModify, "table=2,actions=output:1")
	fm.Cookie, fm.CookieMask = 0x22, ^uint64(0)
	if _, err := p.FlowMod(fm); err != nil {
		t.Fatal(err)
	}
	fs := p.FlowStats(&openflow.FlowStatsRequest{TableID: 2, Cookie: 0x22, CookieMask: ^uint64(0), OutPort: 1, OutGroup: openflow.GroupAny})
	if len(fs) != 1 {
		t.Fatalf("modified rule with cookie 0x22 and output:1: %d found", len(fs))
	}
	if rm, _ := p.FlowMod(delByCookie(openflow.TableAll, 0x22, ^uint64(0))); len(rm) != 1 {
		t.Errorf("the new cookie removed %d rules, want 1", len(rm))
	}
}

// TestIndexedSelectionMatchesScan drives two pipelines with the same
// random adds, modifies, deletes (strict or not, by cookie and mask,
// out_port, out_group, one table or all) and group deletes, one selecting
// through the indexes and one scanning, and requires the same removed
// rules and the same tables after every step.
func TestIndexedSelectionMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	idx, _ := newTestPipeline(t, 3)
	scan, _ := newTestPipeline(t, 3)
	defer func() { scanSelection = false }()
	groupAdd := func(id uint32) *openflow.GroupMod {
		return &openflow.GroupMod{Command: openflow.GroupAdd, GroupType: openflow.GroupTypeIndirect, GroupID: id,
			Buckets: []openflow.Bucket{{WatchPort: openflow.PortAny, WatchGroup: openflow.GroupAny,
				Actions: openflow.Actions{openflow.ActionOutput{Port: 3}}}}}
	}
	both := func(step string, fn func(p *Pipeline) any) {
		t.Helper()
		scanSelection = true
		want := fn(scan)
		scanSelection = false
		got := fn(idx)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\nindexed %v\nscanned %v", step, got, want)
		}
	}
	for g := uint32(1); g <= 3; g++ {
		both("group add", func(p *Pipeline) any { return p.GroupMod(groupAdd(g)) })
	}
	matches := []string{"", "tcp", "udp", "tcp,nw_dst=10.0.0.1", "tcp,nw_dst=10.0.0.2", "ip,nw_dst=10.0.0.0/24", "in_port=1", "in_port=2,tcp"}
	cookies := []uint64{0, 0x0400000000000001, 0x0400000000000002, 0x0300000000000001, 0x11}
	masks := []uint64{0, ^uint64(0), 1<<56 - 1, 0xff << 56, 0x0f}
	acts := []string{"output:1", "output:2", "group:1", "group:2", "output:1,group:3", "drop"}
	for step := 0; step < 3000; step++ {
		table := uint8(rng.Intn(4))
		m := matches[rng.Intn(len(matches))]
		fm := flowMod(t, openflow.FlowAdd, fmt.Sprintf("table=%d,priority=%d,%sactions=%s", table, 1+rng.Intn(3),
			map[bool]string{true: m + ",", false: ""}[m != ""], acts[rng.Intn(len(acts))]))
		fm.Cookie = cookies[rng.Intn(len(cookies))]
		if rng.Intn(4) == 0 {
			fm.IdleTimeout = 60
		}
		switch op := rng.Intn(10); {
		case op < 5:
		case op < 7:
			fm.Command = []uint8{openflow.FlowModify, openflow.FlowModifyStrict}[rng.Intn(2)]
			fm.CookieMask = masks[rng.Intn(len(masks))]
		case op < 9:
			fm.Command = []uint8{openflow.FlowDelete, openflow.FlowDeleteStrict}[rng.Intn(2)]
			fm.CookieMask = masks[rng.Intn(len(masks))]
			if rng.Intn(2) == 0 {
				fm.TableID = openflow.TableAll
			}
			if rng.Intn(3) == 0 {
				fm.OutPort = uint32(1 + rng.Intn(2))
			}
			if rng.Intn(3) == 0 {
				fm.OutGroup = uint32(1 + rng.Intn(3))
			}
		default:
			g := uint32(1 + rng.Intn(3))
			both(fmt.Sprintf("step %d: group %d delete", step, g), func(p *Pipeline) any {
				return []any{p.GroupMod(&openflow.GroupMod{Command: openflow.GroupDelete, GroupID: g}), p.Expire(), p.GroupMod(groupAdd(g))}
			})
			continue
		}
		both(fmt.Sprintf("step %d: %v", step, fm), func(p *Pipeline) any {
			c := *fm
			rm, err := p.FlowMod(&c)
			return []any{rm, err}
		})
		both(fmt.Sprintf("step %d: tables after %v", step, fm), func(p *Pipeline) any {
			return []any{p.FlowStats(&openflow.FlowStatsRequest{TableID: openflow.TableAll, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny}),
				p.FlowStats(&openflow.FlowStatsRequest{TableID: openflow.TableAll, Cookie: fm.Cookie, CookieMask: fm.CookieMask, OutPort: openflow.PortAny, OutGroup: 2}),
				p.groupRefs(1), p.groupRefs(2), p.groupRefs(3)}
		})
	}
	// Expire's shortcut: each table counts its rules with a timeout.
	for _, tb := range idx.tables {
		n := 0
		for _, r := range tb.rules {
			n += r.timedCount()
		}
		if tb.timed != n {
			t.Errorf("table %d counts %d rules with a timeout, holds %d", tb.id, tb.timed, n)
		}
	}
	if n := len(idx.FlowStats(&openflow.FlowStatsRequest{TableID: openflow.TableAll, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny})); n < 20 {
		t.Errorf("only %d rules at the end: the walk did not keep the tables busy", n)
	}
}
