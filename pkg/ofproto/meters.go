package ofproto

import (
	"sort"
	"time"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// Meters: the pipeline keeps each meter's configuration and which flows
// use it; the fast path enforces the rates (a token bucket per band,
// pkg/datapath) through a flow.Meter action the translation emits where
// the meter instruction runs.

// MaxMeters and MaxMeterBands are what METER_FEATURES advertises and
// METER_MOD enforces (the fast path's map holds MaxMeters entries of
// MaxMeterBands bands).
const (
	MaxMeters     = 4096
	MaxMeterBands = 4
)

// Meter is one meter's configuration.
type Meter struct {
	ID      uint32
	Flags   uint16 // OFPMF_*
	Bands   []openflow.MeterBand
	Created time.Time
}

// MeterMod applies OFPT_METER_MOD and returns the meter as it is now (nil
// after DELETE) for the datapath to enforce. Errors are *openflow.Error:
// the codec's Validate; METER_EXISTS (ADD of an existing id),
// UNKNOWN_METER (MODIFY of a missing one), INVALID_METER (the virtual
// slowpath/controller meters), OUT_OF_METERS, OUT_OF_BANDS (more than
// MaxMeterBands), BAD_BAND (experimenter bands). Without OFPMF_BURST (or
// with burst_size 0) a band's bucket holds 100 ms of its rate, at least
// one frame. Deleting a meter removes the flows that use it (FLOW_REMOVED
// reason DELETE, returned by the next Expire).
func (p *Pipeline) MeterMod(mm *openflow.MeterMod) (deleted []uint32, err error) {
	if err := mm.Validate(); err != nil {
		return nil, err
	}
	if mm.MeterID == openflow.MeterSlowPath || mm.MeterID == openflow.MeterController {
		return nil, ofErr(openflow.ErrTypeMeterModFailed, openflow.MeterModInvalidMeter, "virtual meter %#x is not supported", mm.MeterID)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch mm.Command {
	case openflow.MeterDelete:
		return p.deleteMeter(mm.MeterID), nil
	case openflow.MeterAdd:
		if p.meters[mm.MeterID] != nil {
			return nil, ofErr(openflow.ErrTypeMeterModFailed, openflow.MeterModMeterExists, "meter %d exists", mm.MeterID)
		}
		if len(p.meters) >= MaxMeters {
			return nil, ofErr(openflow.ErrTypeMeterModFailed, openflow.MeterModOutOfMeters, "%d meters", len(p.meters))
		}
	case openflow.MeterModify:
		if p.meters[mm.MeterID] == nil {
			return nil, ofErr(openflow.ErrTypeMeterModFailed, openflow.MeterModUnknownMeter, "meter %d does not exist", mm.MeterID)
		}
	}
	if len(mm.Bands) > MaxMeterBands {
		return nil, ofErr(openflow.ErrTypeMeterModFailed, openflow.MeterModOutOfBands, "%d bands, at most %d", len(mm.Bands), MaxMeterBands)
	}
	for _, b := range mm.Bands {
		if b.Type != openflow.MeterBandDrop && b.Type != openflow.MeterBandDSCPRemark {
			return nil, ofErr(openflow.ErrTypeMeterModFailed, openflow.MeterModBadBand, "band type %d", b.Type)
		}
	}
	m := &Meter{ID: mm.MeterID, Flags: mm.Flags, Bands: append([]openflow.MeterBand(nil), mm.Bands...), Created: p.cfg.Now()}
	if old := p.meters[mm.MeterID]; old != nil {
		m.Created = old.Created
	}
	p.meters[mm.MeterID] = m
	return nil, nil
}

// deleteMeter removes meter id (or all) and the flows using them; it
// returns the ids removed.
func (p *Pipeline) deleteMeter(id uint32) []uint32 {
	doomed := map[uint32]bool{}
	for mid := range p.meters {
		if id == openflow.MeterAll || mid == id {
			doomed[mid] = true
		}
	}
	if len(doomed) == 0 {
		return nil
	}
	now := p.cfg.Now()
	for _, t := range p.tables {
		for _, r := range t.removeIf(func(r *rule) bool { return r.meter != 0 && doomed[r.meter] }) {
			p.nrules--
			p.pending = append(p.pending, removedOf(r, openflow.FlowRemovedDelete, now))
			p.releaseRule(r)
		}
	}
	var out []uint32
	for mid := range doomed {
		delete(p.meters, mid)
		out = append(out, mid)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	p.bump()
	return out
}

// Meters returns meter id (or every meter for openflow.MeterAll) with the
// number of flows using each, in id order.
func (p *Pipeline) Meters(id uint32) ([]Meter, []uint32) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	var ms []Meter
	for mid, m := range p.meters {
		if id == openflow.MeterAll || mid == id {
			ms = append(ms, *m)
		}
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].ID < ms[j].ID })
	flows := make([]uint32, len(ms))
	idx := map[uint32]int{}
	for i, m := range ms {
		idx[m.ID] = i
	}
	for _, t := range p.tables {
		for _, r := range t.rules {
			if i, ok := idx[r.meter]; ok && r.meter != 0 {
				flows[i]++
			}
		}
	}
	return ms, flows
}

// MeterFeatures is what METER_FEATURES reports.
func MeterFeatures() openflow.MeterFeaturesReply {
	return openflow.MeterFeaturesReply{
		MaxMeter:     MaxMeters,
		BandTypes:    1<<openflow.MeterBandDrop | 1<<openflow.MeterBandDSCPRemark,
		Capabilities: uint32(openflow.MeterFlagKbps | openflow.MeterFlagPktps | openflow.MeterFlagBurst | openflow.MeterFlagStats),
		MaxBands:     MaxMeterBands,
		MaxColor:     0,
	}
}
