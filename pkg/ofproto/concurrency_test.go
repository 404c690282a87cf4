package ofproto

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// Translations, credits, flow and group mods, port changes and expiry run
// concurrently (the daemon's upcall handlers, revalidator and OpenFlow
// connections). Run with -race.
func TestConcurrentUse(t *testing.T) {
	p, _ := newTestPipeline(t, 4)
	addGroup(t, p, 1, openflow.GroupTypeSelect, bucket(t, 1, anyP, anyG, "output:2"), bucket(t, 1, anyP, anyG, "output:3"))
	mustAdd(t, p, "priority=0,actions=NORMAL", "priority=10,tcp,actions=group:1,CONTROLLER:64")
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := tcpKey(uint32(1+i%4), "10.0.0.1", "10.0.0.2", uint16(i), uint16(w))
				k.NwProto = uint8(6 + 11*(i%2))
				tr, err := p.Translate(k, TranslateOptions{Trace: i%7 == 0})
				if err != nil {
					t.Error(err)
					return
				}
				p.Credit(tr.Rules, 1, 64, time.Unix(1_700_000_000, 0))
			}
		}()
	}
	for i := range 200 {
		mustAdd(t, p, fmt.Sprintf("priority=%d,idle_timeout=1,udp,tp_dst=%d,actions=output:4", 20+i%5, i))
		if i%10 == 0 {
			p.SetPorts([]Port{{No: 1}, {No: 2}, {No: 3}, {No: 4, Config: uint32(i % 2)}})
			_ = p.GroupMod(&openflow.GroupMod{Command: openflow.GroupModify, GroupType: openflow.GroupTypeSelect, GroupID: 1,
				Buckets: []openflow.Bucket{bucket(t, uint16(1+i%3), anyP, anyG, "output:2")}})
			p.FlowStats(&openflow.FlowStatsRequest{TableID: openflow.TableAll, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny})
			p.GroupStats(&openflow.GroupStatsRequest{GroupID: openflow.GroupAll})
			p.TableStats()
		}
		if i%50 == 0 {
			p.Expire()
		}
	}
	close(stop)
	wg.Wait()
}
