package openflow

import "fmt"

// GROUP_MOD with its buckets, and METER_MOD with its bands.

// Group-mod commands (ofp_group_mod_command).
const (
	GroupAdd    uint16 = 0
	GroupModify uint16 = 1
	GroupDelete uint16 = 2
)

// Group types (ofp_group_type).
const (
	GroupTypeAll      uint8 = 0
	GroupTypeSelect   uint8 = 1
	GroupTypeIndirect uint8 = 2
	GroupTypeFF       uint8 = 3 // fast failover
)

// Bucket is ofp_bucket.
//
//	2 bytes: len, of this bucket including its actions
//	2 bytes: weight (select groups only)
//	4 bytes: watch_port (fast-failover: bucket is live while this port is)
//	4 bytes: watch_group (fast-failover)
//	4 bytes: pad
//	rest:    actions
type Bucket struct {
	Weight     uint16
	WatchPort  uint32
	WatchGroup uint32
	Actions    Actions
}

// MarshalBinary encodes the bucket.
func (bk Bucket) MarshalBinary() ([]byte, error) { return bk.appendTo(nil) }

func (bk Bucket) appendTo(b []byte) ([]byte, error) {
	o := len(b)
	b = append(b, make([]byte, 16)...)
	be.PutUint16(b[o+2:], bk.Weight)
	be.PutUint32(b[o+4:], bk.WatchPort)
	be.PutUint32(b[o+8:], bk.WatchGroup)
	b, err := bk.Actions.appendTo(b)
	if err != nil {
		return nil, err
	}
	if len(b)-o > 0xffff {
		return nil, errTooLong("bucket")
	}
	be.PutUint16(b[o:], uint16(len(b)-o))
	return b, nil
}

// UnmarshalBinary decodes exactly one bucket.
func (bk *Bucket) UnmarshalBinary(b []byte) error {
	n, err := bk.decode(b)
	if err == nil && n != len(b) {
		return bad(ErrTypeGroupModFailed, GroupModBadBucket, "%d bytes after bucket", len(b)-n)
	}
	return err
}

func (bk *Bucket) decode(b []byte) (int, error) {
	if len(b) < 16 {
		return 0, short(ErrTypeGroupModFailed, GroupModBadBucket, "bucket")
	}
	n := int(be.Uint16(b))
	if n < 16 || n%8 != 0 {
		return 0, bad(ErrTypeGroupModFailed, GroupModBadBucket, "bucket length %d", n)
	}
	if n > len(b) {
		return 0, short(ErrTypeGroupModFailed, GroupModBadBucket, "bucket actions")
	}
	bk.Weight, bk.WatchPort, bk.WatchGroup = be.Uint16(b[2:]), be.Uint32(b[4:]), be.Uint32(b[8:])
	return n, bk.Actions.UnmarshalBinary(b[16:n])
}

func decodeBuckets(b []byte) ([]Bucket, error) {
	var bs []Bucket
	for len(b) > 0 {
		var bk Bucket
		n, err := bk.decode(b)
		if err != nil {
			return nil, err
		}
		bs = append(bs, bk)
		b = b[n:]
	}
	return bs, nil
}

func appendBuckets(b []byte, bs []Bucket) ([]byte, error) {
	var err error
	for _, bk := range bs {
		if b, err = bk.appendTo(b); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// GroupMod is OFPT_GROUP_MOD.
//
//	8 bytes: ofp_header
//	2 bytes: command (Group{Add,Modify,Delete})
//	1 byte:  type (GroupType*)
//	1 byte:  pad
//	4 bytes: group_id
//	rest:    buckets
type GroupMod struct {
	MsgHeader
	Command   uint16
	GroupType uint8
	GroupID   uint32
	Buckets   []Bucket
}

// MsgType returns TypeGroupMod.
func (*GroupMod) MsgType() MsgType { return TypeGroupMod }

// MarshalBinary encodes the GROUP_MOD.
func (m *GroupMod) MarshalBinary() ([]byte, error) {
	b := m.start(TypeGroupMod, 16)
	be.PutUint16(b[8:], m.Command)
	b[10] = m.GroupType
	be.PutUint32(b[12:], m.GroupID)
	b, err := appendBuckets(b, m.Buckets)
	if err != nil {
		return nil, err
	}
	return finish(b)
}

// UnmarshalBinary decodes a GROUP_MOD.
func (m *GroupMod) UnmarshalBinary(b []byte) error {
	body, err := m.parse(b, TypeGroupMod)
	if err != nil {
		return err
	}
	if len(body) < 8 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "group mod")
	}
	m.Command, m.GroupType, m.GroupID = be.Uint16(body), body[2], be.Uint32(body[4:])
	m.Buckets, err = decodeBuckets(body[8:])
	return err
}

// Validate checks the GROUP_MOD: command (OFPGMFC_BAD_COMMAND), type
// (OFPGMFC_BAD_TYPE), group id (OFPGMFC_INVALID_GROUP above OFPG_MAX
// except delete of OFPG_ALL), bucket count and weights (OFPGMFC_BAD_BUCKET:
// indirect groups have exactly one bucket, only select groups weigh),
// fast-failover watches (OFPGMFC_BAD_WATCH) and each bucket's actions.
func (m *GroupMod) Validate() error {
	if m.Command > GroupDelete {
		return bad(ErrTypeGroupModFailed, GroupModBadCommand, "command %d", m.Command)
	}
	if m.GroupID > GroupMax && !(m.Command == GroupDelete && m.GroupID == GroupAll) {
		return bad(ErrTypeGroupModFailed, GroupModInvalidGroup, "group id %#x", m.GroupID)
	}
	if m.Command == GroupDelete {
		return nil
	}
	if m.GroupType > GroupTypeFF {
		return bad(ErrTypeGroupModFailed, GroupModBadType, "group type %d", m.GroupType)
	}
	if m.GroupType == GroupTypeIndirect && len(m.Buckets) != 1 {
		return bad(ErrTypeGroupModFailed, GroupModBadBucket, "indirect group with %d buckets", len(m.Buckets))
	}
	for _, bk := range m.Buckets {
		if bk.Weight != 0 && m.GroupType != GroupTypeSelect {
			return bad(ErrTypeGroupModFailed, GroupModBadBucket, "weight in a non-select group")
		}
		if m.GroupType == GroupTypeFF && bk.WatchPort == PortAny && bk.WatchGroup == GroupAny {
			return bad(ErrTypeGroupModFailed, GroupModBadWatch, "fast-failover bucket watches nothing")
		}
		if err := ValidateActions(bk.Actions, Match{}); err != nil {
			return err
		}
	}
	return nil
}

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
