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
	macDeps []ofproto.MACDep // NORMAL lookups the translation made
	version uint64           // pipeline version it was last checked against
	packets uint64           // datapath counters already credited
	bytes   uint64
	created time.Time
	orphan  bool   // inherited from a previous process: no rules known
	id      uint32 // fast-path flow id (set by flowCache.set)
}

// flowCache holds the ukeys of the megaflows in the fast path, indexed by
// the fast path's flow id (ids are dense: the smallest free one is reused).
type flowCache struct {
	mu    sync.Mutex
	ukeys []*ukey
	n     int
}

func newFlowCache() *flowCache { return &flowCache{} }

func (c *flowCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// get, set and del are called with c.mu held.
func (c *flowCache) get(id uint32) *ukey {
	if int(id) < len(c.ukeys) {
		return c.ukeys[id]
	}
	return nil
}

func (c *flowCache) set(id uint32, uk *ukey) {
	if int(id) >= len(c.ukeys) {
		c.ukeys = append(c.ukeys, make([]*ukey, int(id)+1-len(c.ukeys))...)
	}
	if c.ukeys[id] == nil {
		c.n++
	}
	uk.id = id
	c.ukeys[id] = uk
}

func (c *flowCache) del(id uint32) {
	if int(id) < len(c.ukeys) && c.ukeys[id] != nil {
		c.ukeys[id] = nil
		c.n--
	}
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
		c.set(f.ID, &ukey{packet: f.Key, mask: f.Mask, actions: f.Actions, created: time.Now(), orphan: true,
			packets: f.Stats.Packets, bytes: f.Stats.Bytes})
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
	s.cache.ukeys, s.cache.n = nil, 0
	return err
}
