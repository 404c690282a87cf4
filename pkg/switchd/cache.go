package switchd

import (
	"sync"
	"time"

	"github.com/nagare-net/nagare/pkg/datapath"
	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/ofproto"
)

// ukey is the slow path's record of one megaflow it installed (Open
// vSwitch's "udpif key"): the packet key that made it, the OpenFlow rules
// it came from, and the statistics already credited to them.
type ukey struct {
	packet  flow.Key // full key of the packet that was translated
	mask    flow.Mask
	actions []flow.Action
	rules   []ofproto.RuleRef
	version uint64 // pipeline version it was last checked against
	packets uint64 // datapath counters already credited
	bytes   uint64
	created time.Time
	orphan  bool // inherited from a previous process: no rules known
}

// flowCache holds the ukeys of the megaflows in the fast path, by the
// fast path's flow id.
type flowCache struct {
	mu    sync.Mutex
	ukeys map[uint32]*ukey
}

func newFlowCache() *flowCache { return &flowCache{ukeys: map[uint32]*ukey{}} }

func (c *flowCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ukeys)
}

// adopt records the flows a previous process left in the fast path; they
// keep forwarding and are revalidated like any other once the pipeline
// has rules.
func (c *flowCache) adopt(dp *datapath.Datapath) error {
	fs, err := dp.Dump()
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range fs {
		c.ukeys[f.ID] = &ukey{packet: f.Key, mask: f.Mask, actions: f.Actions, created: time.Now(), orphan: true,
			packets: f.Stats.Packets, bytes: f.Stats.Bytes}
	}
	return nil
}

// flushCache deletes every cached flow (they are set up again on demand).
func (s *Switch) flushCache() error {
	s.rv.roundMu.Lock()
	defer s.rv.roundMu.Unlock()
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	err := s.dp.Flush()
	s.cache.ukeys = map[uint32]*ukey{}
	return err
}
