package openflow

import "fmt"

// METER_MOD with its bands, and the METER / METER_CONFIG multipart bodies.

// Meter-mod commands (ofp_meter_mod_command).
const (
	MeterAdd    uint16 = 0
	MeterModify uint16 = 1
	MeterDelete uint16 = 2
)

// Meter band types (ofp_meter_band_type).
const (
	MeterBandDrop         uint16 = 1
	MeterBandDSCPRemark   uint16 = 2
	MeterBandExperimenter uint16 = 0xffff
)

// MeterBand is one ofp_meter_band_*.
//
//	2 bytes: type (MeterBand*)
//	2 bytes: len of this band
//	4 bytes: rate (kb/s or packets/s per the meter flags)
//	4 bytes: burst_size
//	then for DROP: 4 bytes pad; for DSCP_REMARK: 1 byte prec_level, 3 pad;
//	for EXPERIMENTER: 4 bytes experimenter id, then len-16 bytes of data
type MeterBand struct {
	Type         uint16
	Rate         uint32
	BurstSize    uint32
	PrecLevel    uint8  // DSCP_REMARK
	Experimenter uint32 // EXPERIMENTER
	Data         []byte // EXPERIMENTER, or the tail of an unknown band type
}

// MeterMod is OFPT_METER_MOD.
//
//	8 bytes: ofp_header
//	2 bytes: command (Meter*)
//	2 bytes: flags (OFPMF_*)
//	4 bytes: meter_id
//	rest:    bands
type MeterMod struct {
	MsgHeader
	Command uint16
	Flags   uint16
	MeterID uint32
	Bands   []MeterBand
}

// MsgType returns TypeMeterMod.
func (*MeterMod) MsgType() MsgType { return TypeMeterMod }

// MarshalBinary encodes the METER_MOD.
func (m *MeterMod) MarshalBinary() ([]byte, error) {
	b := m.start(TypeMeterMod, 16)
	be.PutUint16(b[8:], m.Command)
	be.PutUint16(b[10:], m.Flags)
	be.PutUint32(b[12:], m.MeterID)
	b, err := appendBands(b, m.Bands)
	if err != nil {
		return nil, err
	}
	return finish(b)
}

// appendBands encodes bands after b.
func appendBands(b []byte, bands []MeterBand) ([]byte, error) {
	for _, band := range bands {
		o := len(b)
		b = append(b, make([]byte, 16)...)
		be.PutUint16(b[o:], band.Type)
		be.PutUint32(b[o+4:], band.Rate)
		be.PutUint32(b[o+8:], band.BurstSize)
		switch band.Type {
		case MeterBandDSCPRemark:
			b[o+12] = band.PrecLevel
		case MeterBandExperimenter:
			be.PutUint32(b[o+12:], band.Experimenter)
		}
		b = append(b, band.Data...)
		if len(b)-o > 0xffff {
			return nil, fmt.Errorf("openflow: meter band too long")
		}
		be.PutUint16(b[o+2:], uint16(len(b)-o))
	}
	return b, nil
}

// UnmarshalBinary decodes a METER_MOD. Band lengths below 16 are
// OFPMMFC_BAD_BAND.
func (m *MeterMod) UnmarshalBinary(b []byte) error {
	body, err := m.parse(b, TypeMeterMod)
	if err != nil {
		return err
	}
	if len(body) < 8 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "meter mod")
	}
	m.Command, m.Flags, m.MeterID = be.Uint16(body), be.Uint16(body[2:]), be.Uint32(body[4:])
	m.Bands = nil
	p := body[8:]
	bands, err := parseBands(p)
	m.Bands = bands
	return err
}

// parseBands decodes a list of meter bands.
func parseBands(p []byte) ([]MeterBand, error) {
	var bands []MeterBand
	for len(p) > 0 {
		if len(p) < 4 {
			return nil, short(ErrTypeMeterModFailed, MeterModBadBand, "meter band header")
		}
		n := int(be.Uint16(p[2:]))
		if n < 16 {
			return nil, bad(ErrTypeMeterModFailed, MeterModBadBand, "band length %d", n)
		}
		if n > len(p) {
			return nil, short(ErrTypeMeterModFailed, MeterModBadBand, "meter band")
		}
		band := MeterBand{Type: be.Uint16(p), Rate: be.Uint32(p[4:]), BurstSize: be.Uint32(p[8:])}
		switch band.Type {
		case MeterBandDSCPRemark:
			band.PrecLevel = p[12]
		case MeterBandExperimenter:
			band.Experimenter = be.Uint32(p[12:])
		}
		if n > 16 {
			band.Data = append([]byte{}, p[16:n]...)
		}
		bands = append(bands, band)
		p = p[n:]
	}
	return bands, nil
}

// Meter flags (ofp_meter_flags).
const (
	MeterFlagKbps  uint16 = 1 << 0
	MeterFlagPktps uint16 = 1 << 1
	MeterFlagBurst uint16 = 1 << 2
	MeterFlagStats uint16 = 1 << 3
)

// Meter numbers (ofp_meter).
const (
	MeterMax        uint32 = 0xffff0000
	MeterSlowPath   uint32 = 0xfffffffd
	MeterController uint32 = 0xfffffffe
	MeterAll        uint32 = 0xffffffff
)

// Validate checks the METER_MOD: command (OFPMMFC_BAD_COMMAND), flags
// (OFPMMFC_BAD_FLAGS: unknown bits, or both or neither of kbps/pktps),
// meter id (OFPMMFC_INVALID_METER) and band types (OFPMMFC_BAD_BAND).
func (m *MeterMod) Validate() error {
	if m.Command > MeterDelete {
		return bad(ErrTypeMeterModFailed, MeterModBadCommand, "command %d", m.Command)
	}
	if m.MeterID == 0 || (m.MeterID > MeterMax && m.MeterID != MeterSlowPath &&
		m.MeterID != MeterController && !(m.Command == MeterDelete && m.MeterID == MeterAll)) {
		return bad(ErrTypeMeterModFailed, MeterModInvalidMeter, "meter id %#x", m.MeterID)
	}
	if m.Command == MeterDelete {
		return nil
	}
	rate := m.Flags & (MeterFlagKbps | MeterFlagPktps)
	if m.Flags&^0xf != 0 || rate == 0 || rate == MeterFlagKbps|MeterFlagPktps {
		return bad(ErrTypeMeterModFailed, MeterModBadFlags, "flags %#x", m.Flags)
	}
	for _, b := range m.Bands {
		switch b.Type {
		case MeterBandDrop, MeterBandDSCPRemark, MeterBandExperimenter:
		default:
			return bad(ErrTypeMeterModFailed, MeterModBadBand, "band type %d", b.Type)
		}
		if b.Rate == 0 {
			return bad(ErrTypeMeterModFailed, MeterModBadRate, "rate 0")
		}
	}
	return nil
}

// MeterRequest is ofp_meter_multipart_request, the body of METER and
// METER_CONFIG requests (8 bytes: 4 bytes meter_id, MeterAll for all; 4
// bytes pad).
type MeterRequest struct {
	Type    MultipartType // MPMeter or MPMeterConfig
	MeterID uint32
}

// MultipartType returns r.Type.
func (r *MeterRequest) MultipartType() MultipartType { return r.Type }

// MarshalBinary encodes the request body.
func (r *MeterRequest) MarshalBinary() ([]byte, error) {
	b := make([]byte, 8)
	be.PutUint32(b, r.MeterID)
	return b, nil
}

// UnmarshalBinary decodes the request body.
func (r *MeterRequest) UnmarshalBinary(b []byte) error {
	if len(b) < 8 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "meter request")
	}
	r.MeterID = be.Uint32(b)
	return nil
}

// MeterBandStats is ofp_meter_band_stats (16 bytes: 8 packet_band_count,
// 8 byte_band_count): what the band acted on.
type MeterBandStats struct{ PacketCount, ByteCount uint64 }

// MeterStats is one ofp_meter_stats.
//
//	4 bytes: meter_id
//	2 bytes: len of this entry
//	6 bytes: pad
//	4 bytes: flow_count
//	8 bytes: packet_in_count
//	8 bytes: byte_in_count
//	4 bytes: duration_sec
//	4 bytes: duration_nsec
//	16 bytes per band: MeterBandStats
type MeterStats struct {
	MeterID                    uint32
	FlowCount                  uint32
	PacketInCount, ByteInCount uint64
	DurationSec, DurationNsec  uint32
	Bands                      []MeterBandStats
}

// MeterStatsReply is the body of a METER reply.
type MeterStatsReply struct{ Stats []MeterStats }

// MultipartType returns MPMeter.
func (*MeterStatsReply) MultipartType() MultipartType { return MPMeter }

// MarshalBinary encodes the entries.
func (r *MeterStatsReply) MarshalBinary() ([]byte, error) {
	var b []byte
	for _, s := range r.Stats {
		o := len(b)
		n := 40 + 16*len(s.Bands)
		if n > 0xffff {
			return nil, errTooLong("meter stats entry")
		}
		b = append(b, make([]byte, n)...)
		be.PutUint32(b[o:], s.MeterID)
		be.PutUint16(b[o+4:], uint16(n))
		be.PutUint32(b[o+12:], s.FlowCount)
		be.PutUint64(b[o+16:], s.PacketInCount)
		be.PutUint64(b[o+24:], s.ByteInCount)
		be.PutUint32(b[o+32:], s.DurationSec)
		be.PutUint32(b[o+36:], s.DurationNsec)
		for i, bs := range s.Bands {
			be.PutUint64(b[o+40+16*i:], bs.PacketCount)
			be.PutUint64(b[o+48+16*i:], bs.ByteCount)
		}
	}
	return b, nil
}

// UnmarshalBinary decodes the entries.
func (r *MeterStatsReply) UnmarshalBinary(b []byte) error {
	r.Stats = nil
	for len(b) > 0 {
		if len(b) < 40 {
			return short(ErrTypeBadRequest, BadRequestBadLen, "meter stats")
		}
		n := int(be.Uint16(b[4:]))
		if n < 40 || n > len(b) || (n-40)%16 != 0 {
			return bad(ErrTypeBadRequest, BadRequestBadLen, "meter stats entry of %d bytes", n)
		}
		s := MeterStats{MeterID: be.Uint32(b), FlowCount: be.Uint32(b[12:]), PacketInCount: be.Uint64(b[16:]),
			ByteInCount: be.Uint64(b[24:]), DurationSec: be.Uint32(b[32:]), DurationNsec: be.Uint32(b[36:])}
		for p := b[40:n]; len(p) >= 16; p = p[16:] {
			s.Bands = append(s.Bands, MeterBandStats{be.Uint64(p), be.Uint64(p[8:])})
		}
		r.Stats = append(r.Stats, s)
		b = b[n:]
	}
	return nil
}

// MeterConfig is one ofp_meter_config.
//
//	2 bytes: length of this entry
//	2 bytes: flags (OFPMF_*)
//	4 bytes: meter_id
//	rest:    bands
type MeterConfig struct {
	Flags   uint16
	MeterID uint32
	Bands   []MeterBand
}

// MeterConfigReply is the body of a METER_CONFIG reply.
type MeterConfigReply struct{ Configs []MeterConfig }

// MultipartType returns MPMeterConfig.
func (*MeterConfigReply) MultipartType() MultipartType { return MPMeterConfig }

// MarshalBinary encodes the entries.
func (r *MeterConfigReply) MarshalBinary() ([]byte, error) {
	var b []byte
	for _, c := range r.Configs {
		o := len(b)
		b = append(b, make([]byte, 8)...)
		be.PutUint16(b[o+2:], c.Flags)
		be.PutUint32(b[o+4:], c.MeterID)
		var err error
		if b, err = appendBands(b, c.Bands); err != nil {
			return nil, err
		}
		if len(b)-o > 0xffff {
			return nil, errTooLong("meter config entry")
		}
		be.PutUint16(b[o:], uint16(len(b)-o))
	}
	return b, nil
}

// UnmarshalBinary decodes the entries.
func (r *MeterConfigReply) UnmarshalBinary(b []byte) error {
	r.Configs = nil
	for len(b) > 0 {
		if len(b) < 8 {
			return short(ErrTypeBadRequest, BadRequestBadLen, "meter config")
		}
		n := int(be.Uint16(b))
		if n < 8 || n > len(b) {
			return bad(ErrTypeBadRequest, BadRequestBadLen, "meter config entry of %d bytes", n)
		}
		bands, err := parseBands(b[8:n])
		if err != nil {
			return err
		}
		r.Configs = append(r.Configs, MeterConfig{Flags: be.Uint16(b[2:]), MeterID: be.Uint32(b[4:]), Bands: bands})
		b = b[n:]
	}
	return nil
}
