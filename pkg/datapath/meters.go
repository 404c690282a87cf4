package datapath

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// Meters are token buckets the fast path keeps per OpenFlow meter
// (bpf/lib/meter.h); a flow.Meter action runs a packet through one.

// MeterBandKind is what a band does to the packets over its rate.
type MeterBandKind uint32

// Band kinds (OFPMBT_*).
const (
	MeterBandDrop       MeterBandKind = 1
	MeterBandDSCPRemark MeterBandKind = 2
)

// MaxMeterBands is the fast path's bands per meter.
const MaxMeterBands = 4

// MeterBand is one band of a meter.
type MeterBand struct {
	Kind      MeterBandKind
	Rate      uint64 // kbit/s, or packets/s for a PPS meter
	Burst     uint64 // kbit, or packets; 0: 100 ms of the rate (at least one frame)
	PrecLevel uint8  // DSCP_REMARK: drop precedence levels to add
}

// MeterConfig is what a meter enforces.
type MeterConfig struct {
	PPS   bool // rates in packets/s, not kbit/s
	Bands []MeterBand
}

// MeterBandStats counts the packets a band acted on.
type MeterBandStats struct{ Packets, Bytes uint64 }

// MeterStats counts the packets a meter saw, and per band those it acted on.
type MeterStats struct {
	Packets, Bytes uint64
	Bands          []MeterBandStats
}

const (
	meterPPS    = 1 << 0
	unitsPerSec = 1_000_000_000 // bucket units per second of rate (meter.h)
	maxFrame    = 1514          // a kbit/s bucket holds at least one such frame
)

// SetMeter installs or changes meter id. Changing a meter keeps its counters
// (and those of the bands it keeps) and refills its buckets.
func (d *Datapath) SetMeter(id uint32, c MeterConfig) error {
	if len(c.Bands) > MaxMeterBands {
		return fmt.Errorf("datapath: meter %d has %d bands, at most %d", id, len(c.Bands), MaxMeterBands)
	}
	var m nagareMeter
	old := nagareMeter{}
	haveOld := d.objs.Meters.LookupWithFlags(id, &old, ebpf.LookupLock) == nil
	if c.PPS {
		m.Flags = meterPPS
	}
	m.N_bands = uint32(len(c.Bands))
	if haveOld {
		m.Packets, m.Bytes, m.Last = old.Packets, old.Bytes, old.Last
	}
	for i, b := range c.Bands {
		if b.Rate == 0 || b.Rate > 1<<32 {
			return fmt.Errorf("datapath: meter %d band %d rate %d", id, i, b.Rate)
		}
		bd := &m.Band[i]
		bd.Rate, bd.Type, bd.PrecLevel = b.Rate, uint32(b.Kind), uint32(b.PrecLevel)
		switch {
		case b.Burst != 0 && c.PPS:
			bd.Cap = b.Burst * unitsPerSec // packets
		case b.Burst != 0:
			bd.Cap = b.Burst * 1000 * 1_000_000 // kbit in 1e-6 bit
		default:
			bd.Cap = b.Rate * unitsPerSec / 10 // 100 ms
		}
		minCap := uint64(unitsPerSec) // one packet
		if !c.PPS {
			minCap = maxFrame * 8 * 1_000_000
		}
		bd.Cap = max(bd.Cap, minCap)
		bd.Tokens = bd.Cap
		if haveOld && i < int(old.N_bands) {
			bd.Packets, bd.Bytes = old.Band[i].Packets, old.Band[i].Bytes
		}
	}
	return d.objs.Meters.Update(id, &m, ebpf.UpdateLock)
}

// DeleteMeter removes meter id; packets of flows still naming it are
// dropped (the pipeline removes those flows with the meter).
func (d *Datapath) DeleteMeter(id uint32) error {
	if err := d.objs.Meters.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

// MeterStats returns the counters of meter id.
func (d *Datapath) MeterStats(id uint32) (MeterStats, error) {
	var m nagareMeter
	if err := d.objs.Meters.LookupWithFlags(id, &m, ebpf.LookupLock); err != nil {
		return MeterStats{}, err
	}
	st := MeterStats{Packets: m.Packets, Bytes: m.Bytes}
	for i := 0; i < int(m.N_bands) && i < MaxMeterBands; i++ {
		st.Bands = append(st.Bands, MeterBandStats{m.Band[i].Packets, m.Band[i].Bytes})
	}
	return st, nil
}
