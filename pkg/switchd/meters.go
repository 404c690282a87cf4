package switchd

import (
	"time"

	"github.com/nagare-net/nagare/pkg/datapath"
	"github.com/nagare-net/nagare/pkg/ofproto"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// meterMod applies a METER_MOD to the pipeline (which keeps the
// configuration and the flows using each meter) and to the fast path
// (which enforces the rates).
func (s *Switch) meterMod(m *openflow.MeterMod) error {
	deleted, err := s.pl.MeterMod(m)
	if err != nil {
		return err
	}
	if m.Command == openflow.MeterDelete {
		for _, id := range deleted {
			if err := s.dp.DeleteMeter(id); err != nil {
				s.log.Warn("deleting meter from the fast path", "meter", id, "err", err)
			}
		}
		return nil
	}
	c := datapath.MeterConfig{PPS: m.Flags&openflow.MeterFlagPktps != 0}
	for _, b := range m.Bands {
		band := datapath.MeterBand{Kind: datapath.MeterBandKind(b.Type), Rate: uint64(b.Rate), PrecLevel: b.PrecLevel}
		if m.Flags&openflow.MeterFlagBurst != 0 {
			band.Burst = uint64(b.BurstSize)
		}
		c.Bands = append(c.Bands, band)
	}
	if err := s.dp.SetMeter(m.MeterID, c); err != nil {
		if m.Command == openflow.MeterAdd {
			_, _ = s.pl.MeterMod(&openflow.MeterMod{Command: openflow.MeterDelete, MeterID: m.MeterID})
		}
		return &openflow.Error{Type: openflow.ErrTypeMeterModFailed, Code: openflow.MeterModOutOfMeters, Reason: err.Error()}
	}
	return nil
}

// meterMultipart answers METER (stats) and METER_CONFIG requests.
func (s *Switch) meterMultipart(m *openflow.MultipartRequest) (openflow.MultipartBody, error) {
	id := openflow.MeterAll
	if req, ok := m.Body.(*openflow.MeterRequest); ok {
		id = req.MeterID
	}
	meters, flows := s.pl.Meters(id)
	if m.Type == openflow.MPMeterConfig {
		r := &openflow.MeterConfigReply{}
		for _, mt := range meters {
			r.Configs = append(r.Configs, openflow.MeterConfig{Flags: mt.Flags, MeterID: mt.ID, Bands: mt.Bands})
		}
		return r, nil
	}
	r := &openflow.MeterStatsReply{}
	now := time.Now()
	for i, mt := range meters {
		st, err := s.dp.MeterStats(mt.ID)
		if err != nil {
			s.log.Warn("reading meter stats", "meter", mt.ID, "err", err)
		}
		d := now.Sub(mt.Created)
		ms := openflow.MeterStats{MeterID: mt.ID, FlowCount: flows[i], PacketInCount: st.Packets, ByteInCount: st.Bytes,
			DurationSec: uint32(d.Seconds()), DurationNsec: uint32(d.Nanoseconds() % 1e9)}
		for j := range mt.Bands {
			var bs openflow.MeterBandStats
			if j < len(st.Bands) {
				bs = openflow.MeterBandStats{PacketCount: st.Bands[j].Packets, ByteCount: st.Bands[j].Bytes}
			}
			ms.Bands = append(ms.Bands, bs)
		}
		r.Stats = append(r.Stats, ms)
	}
	return r, nil
}

// meterFeatures is what METER_FEATURES reports.
func meterFeatures() *openflow.MeterFeaturesReply {
	f := ofproto.MeterFeatures()
	return &f
}
