package openflow

import "fmt"

// METER_MOD with its bands. nagare does not offload meters yet; the codec
// lets the switch decode the request and refuse it precisely.

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

// MeterMod is OFPT_METER_MOD. nagare decodes it so that it can answer
// with a precise error (meters are not offloaded yet).
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
	for _, band := range m.Bands {
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
	return finish(b)
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
	for len(p) > 0 {
		if len(p) < 4 {
			return short(ErrTypeMeterModFailed, MeterModBadBand, "meter band header")
		}
		n := int(be.Uint16(p[2:]))
		if n < 16 {
			return bad(ErrTypeMeterModFailed, MeterModBadBand, "band length %d", n)
		}
		if n > len(p) {
			return short(ErrTypeMeterModFailed, MeterModBadBand, "meter band")
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
		m.Bands = append(m.Bands, band)
		p = p[n:]
	}
	return nil
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
