package switchd

import (
	"sync"
	"time"

	"github.com/nagare-net/nagare/pkg/datapath"
	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/ofproto"
	"github.com/nagare-net/nagare/pkg/placement"
)

// ukey is the slow path's record of one megaflow it installed (Open
// vSwitch's "udpif key"): the packet key that made it, the OpenFlow rules
// it came from, and the statistics already credited to them.
type ukey struct {
	// What every revalidator round reads, first: the allocation is
	// cache-line aligned, so these and packet's leading fields (EthType,
	// for the idle timeout) share its first two lines; with them spread
	// over the struct a round over 100k flows missed the cache 3-4 times
	// a flow.
	packets uint64 // datapath counters already credited
	version uint64 // pipeline version it was last checked against
	// Placement (placement.go): its packet rate as the revalidator
	// measures it, where its packets are handled and what it asks for.
	meter   placement.Meter
	orphan  bool // inherited from a previous process: no rules known
	onload  bool
	mode    placement.Mode
	created time.Time
	packet  flow.Key // full key of the packet that was translated

	bytes   uint64
	mask    flow.Mask
	actions []flow.Action
	rules   []ofproto.RuleRef
	macDeps []ofproto.MACDep // NORMAL lookups the translation made
	id      uint32           // fast-path flow id (set by flowCache.set)
}

// flowCache holds the ukeys of the megaflows in the fast path, indexed by
// the fast path's flow id (ids are dense: the smallest free one is reused).
type flowCache struct {
	mu       sync.Mutex
	ukeys    []*ukey
	n        int
	onloaded int // ukeys with onload set
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
	if old := c.ukeys[id]; old == nil {
		c.n++
	} else if old.onload {
		c.onloaded--
	}
	if uk.onload {
		c.onloaded++
	}
	uk.id = id
	c.ukeys[id] = uk
}

func (c *flowCache) del(id uint32) {
	if int(id) < len(c.ukeys) && c.ukeys[id] != nil {
		if c.ukeys[id].onload {
			c.onloaded--
		}
		c.ukeys[id] = nil
		c.n--
	}
}

// setOnload records a placement change of a cached flow.
func (c *flowCache) setOnload(uk *ukey, onload bool) {
	if uk.onload != onload {
		if onload {
			c.onloaded++
		} else {
			c.onloaded--
		}
		uk.onload = onload
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
			packets: f.Stats.Packets, bytes: f.Stats.Bytes, onload: f.Onload})
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
	s.cache.ukeys, s.cache.n, s.cache.onloaded = nil, 0, 0
	return err
}

// offloaded is the number of cached flows in the fast path.
func (c *flowCache) offloaded() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n - c.onloaded
}
