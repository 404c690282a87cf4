package openflow

import "fmt"

// MULTIPART_REQUEST/REPLY (the OF1.0 "stats") and their bodies.

// MultipartType is ofp_multipart_type.
type MultipartType uint16

// OpenFlow 1.3 multipart types.
const (
	MPDesc          MultipartType = 0
	MPFlow          MultipartType = 1
	MPAggregate     MultipartType = 2
	MPTable         MultipartType = 3
	MPPortStats     MultipartType = 4
	MPQueue         MultipartType = 5
	MPGroup         MultipartType = 6
	MPGroupDesc     MultipartType = 7
	MPGroupFeatures MultipartType = 8
	MPMeter         MultipartType = 9
	MPMeterConfig   MultipartType = 10
	MPMeterFeatures MultipartType = 11
	MPTableFeatures MultipartType = 12
	MPPortDesc      MultipartType = 13
	MPExperimenter  MultipartType = 0xffff
)

// MultipartMore is OFPMPF_REQ_MORE / OFPMPF_REPLY_MORE: more parts follow.
const MultipartMore uint16 = 1

// MultipartBody is the type-specific body of a multipart message: one of
// the *Request / *Reply types below, or *RawBody for types this package
// does not decode.
type MultipartBody interface {
	MultipartType() MultipartType
	MarshalBinary() ([]byte, error)
}

// MultipartRequest is OFPT_MULTIPART_REQUEST.
//
//	8 bytes: ofp_header
//	2 bytes: type (MultipartType)
//	2 bytes: flags (MultipartMore)
//	4 bytes: pad
//	rest:    body, per type
//
// Body is nil for the types whose request body is empty (DESC, TABLE,
// GROUP_DESC, GROUP_FEATURES, METER_FEATURES, PORT_DESC, and TABLE_FEATURES
// when only asking); Type then says which. When Body is set its type wins.
type MultipartRequest struct {
	MsgHeader
	Type  MultipartType
	Flags uint16
	Body  MultipartBody
}

// MultipartReply is OFPT_MULTIPART_REPLY, same layout as the request.
type MultipartReply struct {
	MsgHeader
	Type  MultipartType
	Flags uint16
	Body  MultipartBody
}

// MsgType returns TypeMultipartRequest.
func (*MultipartRequest) MsgType() MsgType { return TypeMultipartRequest }

// MsgType returns TypeMultipartReply.
func (*MultipartReply) MsgType() MsgType { return TypeMultipartReply }

func marshalMultipart(h *MsgHeader, t MsgType, mt MultipartType, flags uint16, body MultipartBody) ([]byte, error) {
	b := h.start(t, 16)
	if body != nil {
		mt = body.MultipartType()
		bb, err := body.MarshalBinary()
		if err != nil {
			return nil, err
		}
		b = append(b, bb...)
	}
	be.PutUint16(b[8:], uint16(mt))
	be.PutUint16(b[10:], flags)
	return finish(b)
}

// MarshalBinary encodes the MULTIPART_REQUEST.
func (m *MultipartRequest) MarshalBinary() ([]byte, error) {
	return marshalMultipart(&m.MsgHeader, TypeMultipartRequest, m.Type, m.Flags, m.Body)
}

// MarshalBinary encodes the MULTIPART_REPLY.
func (m *MultipartReply) MarshalBinary() ([]byte, error) {
	return marshalMultipart(&m.MsgHeader, TypeMultipartReply, m.Type, m.Flags, m.Body)
}

// UnmarshalBinary decodes a MULTIPART_REQUEST.
func (m *MultipartRequest) UnmarshalBinary(b []byte) error {
	body, err := m.parse(b, TypeMultipartRequest)
	if err != nil {
		return err
	}
	if len(body) < 8 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "multipart request")
	}
	m.Type, m.Flags, m.Body = MultipartType(be.Uint16(body)), be.Uint16(body[2:]), nil
	p := body[8:]
	var mb interface {
		MultipartBody
		UnmarshalBinary([]byte) error
	}
	switch m.Type {
	case MPDesc, MPTable, MPGroupDesc, MPGroupFeatures, MPMeterFeatures, MPPortDesc:
		if len(p) != 0 {
			return bad(ErrTypeBadRequest, BadRequestBadLen, "%s request with %d-byte body", m.Type, len(p))
		}
		return nil
	case MPTableFeatures:
		if len(p) == 0 {
			return nil
		}
		mb = &TableFeaturesBody{}
	case MPFlow:
		mb = &FlowStatsRequest{}
	case MPAggregate:
		mb = &AggregateStatsRequest{}
	case MPPortStats:
		mb = &PortStatsRequest{}
	case MPGroup:
		mb = &GroupStatsRequest{}
	case MPMeter, MPMeterConfig:
		mb = &MeterRequest{Type: m.Type}
	default:
		mb = &RawBody{Type: m.Type}
	}
	if err := mb.UnmarshalBinary(p); err != nil {
		return err
	}
	m.Body = mb
	return nil
}

// UnmarshalBinary decodes a MULTIPART_REPLY.
func (m *MultipartReply) UnmarshalBinary(b []byte) error {
	body, err := m.parse(b, TypeMultipartReply)
	if err != nil {
		return err
	}
	if len(body) < 8 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "multipart reply")
	}
	m.Type, m.Flags, m.Body = MultipartType(be.Uint16(body)), be.Uint16(body[2:]), nil
	var mb interface {
		MultipartBody
		UnmarshalBinary([]byte) error
	}
	switch m.Type {
	case MPDesc:
		mb = &DescReply{}
	case MPFlow:
		mb = &FlowStatsReply{}
	case MPAggregate:
		mb = &AggregateStatsReply{}
	case MPTable:
		mb = &TableStatsReply{}
	case MPPortStats:
		mb = &PortStatsReply{}
	case MPPortDesc:
		mb = &PortDescReply{}
	case MPGroup:
		mb = &GroupStatsReply{}
	case MPGroupDesc:
		mb = &GroupDescReply{}
	case MPGroupFeatures:
		mb = &GroupFeaturesReply{}
	case MPMeterFeatures:
		mb = &MeterFeaturesReply{}
	case MPMeter:
		mb = &MeterStatsReply{}
	case MPMeterConfig:
		mb = &MeterConfigReply{}
	case MPTableFeatures:
		mb = &TableFeaturesBody{Reply: true}
	default:
		mb = &RawBody{Type: m.Type}
	}
	if err := mb.UnmarshalBinary(body[8:]); err != nil {
		return err
	}
	m.Body = mb
	return nil
}

// String returns the spec name without the OFPMP_ prefix.
func (t MultipartType) String() string {
	names := map[MultipartType]string{MPDesc: "DESC", MPFlow: "FLOW", MPAggregate: "AGGREGATE",
		MPTable: "TABLE", MPPortStats: "PORT_STATS", MPQueue: "QUEUE", MPGroup: "GROUP",
		MPGroupDesc: "GROUP_DESC", MPGroupFeatures: "GROUP_FEATURES", MPMeter: "METER",
		MPMeterConfig: "METER_CONFIG", MPMeterFeatures: "METER_FEATURES",
		MPTableFeatures: "TABLE_FEATURES", MPPortDesc: "PORT_DESC", MPExperimenter: "EXPERIMENTER"}
	if s, ok := names[t]; ok {
		return s
	}
	return fmt.Sprintf("MULTIPART_%d", uint16(t))
}

// RawBody is a multipart body this package does not decode (QUEUE,
// EXPERIMENTER): the bytes are kept verbatim. A switch answers
// such requests with OFPBRC_BAD_MULTIPART.
type RawBody struct {
	Type MultipartType
	Data []byte
}

// MultipartType returns the body's type.
func (r *RawBody) MultipartType() MultipartType { return r.Type }

// MarshalBinary returns Data.
func (r *RawBody) MarshalBinary() ([]byte, error) { return append([]byte{}, r.Data...), nil }

// UnmarshalBinary keeps b.
func (r *RawBody) UnmarshalBinary(b []byte) error { r.Data = append([]byte{}, b...); return nil }

// DescReply is ofp_desc (1056 bytes), the switch description. Each string
// is NUL-padded to its fixed size.
//
//	256 bytes: mfr_desc
//	256 bytes: hw_desc
//	256 bytes: sw_desc
//	32 bytes:  serial_num
//	256 bytes: dp_desc
type DescReply struct {
	MfrDesc, HWDesc, SWDesc, SerialNum, DPDesc string
}

// MultipartType returns MPDesc.
func (*DescReply) MultipartType() MultipartType { return MPDesc }

// MarshalBinary encodes the 1056-byte description.
func (d *DescReply) MarshalBinary() ([]byte, error) {
	b := make([]byte, 1056)
	putString(b[0:256], d.MfrDesc)
	putString(b[256:512], d.HWDesc)
	putString(b[512:768], d.SWDesc)
	putString(b[768:800], d.SerialNum)
	putString(b[800:1056], d.DPDesc)
	return b, nil
}

// UnmarshalBinary decodes the description.
func (d *DescReply) UnmarshalBinary(b []byte) error {
	if len(b) < 1056 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "desc")
	}
	*d = DescReply{getString(b[0:256]), getString(b[256:512]), getString(b[512:768]),
		getString(b[768:800]), getString(b[800:1056])}
	return nil
}

// FlowStatsRequest is ofp_flow_stats_request (MPFlow).
//
//	1 byte:  table_id (TableAll for all)
//	3 bytes: pad
//	4 bytes: out_port filter (PortAny = none)
//	4 bytes: out_group filter (GroupAny = none)
//	4 bytes: pad
//	8 bytes: cookie
//	8 bytes: cookie_mask (0 = no cookie filter)
//	n bytes: match, padded to 8
type FlowStatsRequest struct {
	TableID    uint8
	OutPort    uint32
	OutGroup   uint32
	Cookie     uint64
	CookieMask uint64
	Match      Match
}

// AggregateStatsRequest is ofp_aggregate_stats_request (MPAggregate),
// laid out exactly like FlowStatsRequest.
type AggregateStatsRequest FlowStatsRequest

// MultipartType returns MPFlow.
func (*FlowStatsRequest) MultipartType() MultipartType { return MPFlow }

// MultipartType returns MPAggregate.
func (*AggregateStatsRequest) MultipartType() MultipartType { return MPAggregate }

// MarshalBinary encodes the request body.
func (r *FlowStatsRequest) MarshalBinary() ([]byte, error) {
	b := make([]byte, 32)
	b[0] = r.TableID
	be.PutUint32(b[4:], r.OutPort)
	be.PutUint32(b[8:], r.OutGroup)
	be.PutUint64(b[16:], r.Cookie)
	be.PutUint64(b[24:], r.CookieMask)
	return r.Match.appendTo(b)
}

// UnmarshalBinary decodes the request body.
func (r *FlowStatsRequest) UnmarshalBinary(b []byte) error {
	if len(b) < 32 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "flow stats request")
	}
	r.TableID, r.OutPort, r.OutGroup = b[0], be.Uint32(b[4:]), be.Uint32(b[8:])
	r.Cookie, r.CookieMask = be.Uint64(b[16:]), be.Uint64(b[24:])
	return r.Match.UnmarshalBinary(b[32:])
}

// MarshalBinary encodes the request body.
func (r *AggregateStatsRequest) MarshalBinary() ([]byte, error) {
	return (*FlowStatsRequest)(r).MarshalBinary()
}

// UnmarshalBinary decodes the request body.
func (r *AggregateStatsRequest) UnmarshalBinary(b []byte) error {
	return (*FlowStatsRequest)(r).UnmarshalBinary(b)
}

// FlowStats is one ofp_flow_stats entry.
//
//	2 bytes: length of this entry
//	1 byte:  table_id
//	1 byte:  pad
//	4 bytes: duration_sec
//	4 bytes: duration_nsec
//	2 bytes: priority
//	2 bytes: idle_timeout
//	2 bytes: hard_timeout
//	2 bytes: flags (FlowFlag*)
//	4 bytes: pad
//	8 bytes: cookie
//	8 bytes: packet_count
//	8 bytes: byte_count
//	n bytes: match, padded to 8
//	rest:    instructions
type FlowStats struct {
	TableID      uint8
	DurationSec  uint32
	DurationNsec uint32
	Priority     uint16
	IdleTimeout  uint16
	HardTimeout  uint16
	Flags        uint16
	Cookie       uint64
	PacketCount  uint64
	ByteCount    uint64
	Match        Match
	Instructions Instructions
}

// FlowStatsReply is the MPFlow reply body: flow entries back to back.
type FlowStatsReply struct{ Stats []FlowStats }

// MultipartType returns MPFlow.
func (*FlowStatsReply) MultipartType() MultipartType { return MPFlow }

// MarshalBinary encodes the entries.
func (r *FlowStatsReply) MarshalBinary() ([]byte, error) {
	var b []byte
	for _, s := range r.Stats {
		o := len(b)
		b = append(b, make([]byte, 48)...)
		e := b[o:]
		e[2] = s.TableID
		be.PutUint32(e[4:], s.DurationSec)
		be.PutUint32(e[8:], s.DurationNsec)
		be.PutUint16(e[12:], s.Priority)
		be.PutUint16(e[14:], s.IdleTimeout)
		be.PutUint16(e[16:], s.HardTimeout)
		be.PutUint16(e[18:], s.Flags)
		be.PutUint64(e[24:], s.Cookie)
		be.PutUint64(e[32:], s.PacketCount)
		be.PutUint64(e[40:], s.ByteCount)
		var err error
		if b, err = s.Match.appendTo(b); err != nil {
			return nil, err
		}
		if b, err = s.Instructions.appendTo(b); err != nil {
			return nil, err
		}
		if len(b)-o > 0xffff {
			return nil, errTooLong("flow stats entry")
		}
		be.PutUint16(b[o:], uint16(len(b)-o))
	}
	return b, nil
}

// UnmarshalBinary decodes the entries.
func (r *FlowStatsReply) UnmarshalBinary(b []byte) error {
	r.Stats = nil
	for len(b) > 0 {
		n, err := entryLen(b, 48, "flow stats")
		if err != nil {
			return err
		}
		e := b[:n]
		s := FlowStats{TableID: e[2], DurationSec: be.Uint32(e[4:]), DurationNsec: be.Uint32(e[8:]),
			Priority: be.Uint16(e[12:]), IdleTimeout: be.Uint16(e[14:]), HardTimeout: be.Uint16(e[16:]),
			Flags: be.Uint16(e[18:]), Cookie: be.Uint64(e[24:]), PacketCount: be.Uint64(e[32:]),
			ByteCount: be.Uint64(e[40:])}
		k, err := s.Match.decode(e[48:])
		if err != nil {
			return err
		}
		if err := s.Instructions.UnmarshalBinary(e[48+k:]); err != nil {
			return err
		}
		r.Stats = append(r.Stats, s)
		b = b[n:]
	}
	return nil
}

// entryLen reads the 2-byte length leading a variable-size entry and checks
// it is at least min and fits in b.
func entryLen(b []byte, min int, what string) (int, error) {
	if len(b) < min {
		return 0, short(ErrTypeBadRequest, BadRequestBadLen, what)
	}
	n := int(be.Uint16(b))
	if n < min {
		return 0, bad(ErrTypeBadRequest, BadRequestBadLen, "%s entry length %d", what, n)
	}
	if n > len(b) {
		return 0, short(ErrTypeBadRequest, BadRequestBadLen, what)
	}
	return n, nil
}

// AggregateStatsReply is ofp_aggregate_stats_reply (24 bytes).
//
//	8 bytes: packet_count
//	8 bytes: byte_count
//	4 bytes: flow_count
//	4 bytes: pad
type AggregateStatsReply struct {
	PacketCount uint64
	ByteCount   uint64
	FlowCount   uint32
}

// MultipartType returns MPAggregate.
func (*AggregateStatsReply) MultipartType() MultipartType { return MPAggregate }

// MarshalBinary encodes the reply body.
func (r *AggregateStatsReply) MarshalBinary() ([]byte, error) {
	b := make([]byte, 24)
	be.PutUint64(b, r.PacketCount)
	be.PutUint64(b[8:], r.ByteCount)
	be.PutUint32(b[16:], r.FlowCount)
	return b, nil
}

// UnmarshalBinary decodes the reply body.
func (r *AggregateStatsReply) UnmarshalBinary(b []byte) error {
	if len(b) < 24 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "aggregate stats")
	}
	r.PacketCount, r.ByteCount, r.FlowCount = be.Uint64(b), be.Uint64(b[8:]), be.Uint32(b[16:])
	return nil
}

// TableStats is one ofp_table_stats (24 bytes).
//
//	1 byte:  table_id
//	3 bytes: pad
//	4 bytes: active_count, flow entries in the table
//	8 bytes: lookup_count
//	8 bytes: matched_count
type TableStats struct {
	TableID      uint8
	ActiveCount  uint32
	LookupCount  uint64
	MatchedCount uint64
}

// TableStatsReply is the MPTable reply body.
type TableStatsReply struct{ Stats []TableStats }

// MultipartType returns MPTable.
func (*TableStatsReply) MultipartType() MultipartType { return MPTable }

// MarshalBinary encodes the entries.
func (r *TableStatsReply) MarshalBinary() ([]byte, error) {
	b := make([]byte, 24*len(r.Stats))
	for i, s := range r.Stats {
		e := b[24*i:]
		e[0] = s.TableID
		be.PutUint32(e[4:], s.ActiveCount)
		be.PutUint64(e[8:], s.LookupCount)
		be.PutUint64(e[16:], s.MatchedCount)
	}
	return b, nil
}

// UnmarshalBinary decodes the entries.
func (r *TableStatsReply) UnmarshalBinary(b []byte) error {
	if len(b)%24 != 0 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "table stats")
	}
	r.Stats = nil
	for ; len(b) > 0; b = b[24:] {
		r.Stats = append(r.Stats, TableStats{b[0], be.Uint32(b[4:]), be.Uint64(b[8:]), be.Uint64(b[16:])})
	}
	return nil
}

// PortStatsRequest is ofp_port_stats_request (8 bytes: 4 bytes port_no,
// PortAny for all; 4 bytes pad).
type PortStatsRequest struct{ PortNo uint32 }

// MultipartType returns MPPortStats.
func (*PortStatsRequest) MultipartType() MultipartType { return MPPortStats }

// MarshalBinary encodes the request body.
func (r *PortStatsRequest) MarshalBinary() ([]byte, error) {
	b := make([]byte, 8)
	be.PutUint32(b, r.PortNo)
	return b, nil
}

// UnmarshalBinary decodes the request body.
func (r *PortStatsRequest) UnmarshalBinary(b []byte) error {
	if len(b) < 8 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "port stats request")
	}
	r.PortNo = be.Uint32(b)
	return nil
}

// PortStats is one ofp_port_stats (112 bytes).
//
//	4 bytes: port_no
//	4 bytes: pad
//	12×8 bytes: rx_packets, tx_packets, rx_bytes, tx_bytes, rx_dropped,
//	            tx_dropped, rx_errors, tx_errors, rx_frame_err,
//	            rx_over_err, rx_crc_err, collisions
//	4 bytes: duration_sec
//	4 bytes: duration_nsec
type PortStats struct {
	PortNo                 uint32
	RxPackets, TxPackets   uint64
	RxBytes, TxBytes       uint64
	RxDropped, TxDropped   uint64
	RxErrors, TxErrors     uint64
	RxFrameErr, RxOverErr  uint64
	RxCRCErr, Collisions   uint64
	DurationSec, DurationN uint32
}

func (s *PortStats) counters() [12]*uint64 {
	return [12]*uint64{&s.RxPackets, &s.TxPackets, &s.RxBytes, &s.TxBytes, &s.RxDropped,
		&s.TxDropped, &s.RxErrors, &s.TxErrors, &s.RxFrameErr, &s.RxOverErr, &s.RxCRCErr, &s.Collisions}
}

// PortStatsReply is the MPPortStats reply body.
type PortStatsReply struct{ Stats []PortStats }

// MultipartType returns MPPortStats.
func (*PortStatsReply) MultipartType() MultipartType { return MPPortStats }

// MarshalBinary encodes the entries.
func (r *PortStatsReply) MarshalBinary() ([]byte, error) {
	b := make([]byte, 112*len(r.Stats))
	for i := range r.Stats {
		s, e := &r.Stats[i], b[112*i:]
		be.PutUint32(e, s.PortNo)
		for j, c := range s.counters() {
			be.PutUint64(e[8+8*j:], *c)
		}
		be.PutUint32(e[104:], s.DurationSec)
		be.PutUint32(e[108:], s.DurationN)
	}
	return b, nil
}

// UnmarshalBinary decodes the entries.
func (r *PortStatsReply) UnmarshalBinary(b []byte) error {
	if len(b)%112 != 0 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "port stats")
	}
	r.Stats = nil
	for ; len(b) > 0; b = b[112:] {
		s := PortStats{PortNo: be.Uint32(b), DurationSec: be.Uint32(b[104:]), DurationN: be.Uint32(b[108:])}
		for j, c := range s.counters() {
			*c = be.Uint64(b[8+8*j:])
		}
		r.Stats = append(r.Stats, s)
	}
	return nil
}

// PortDescReply is the MPPortDesc reply body: ofp_port entries.
type PortDescReply struct{ Ports []Port }

// MultipartType returns MPPortDesc.
func (*PortDescReply) MultipartType() MultipartType { return MPPortDesc }

// MarshalBinary encodes the ports.
func (r *PortDescReply) MarshalBinary() ([]byte, error) {
	var b []byte
	for _, p := range r.Ports {
		b = p.appendTo(b)
	}
	return b, nil
}

// UnmarshalBinary decodes the ports.
func (r *PortDescReply) UnmarshalBinary(b []byte) error {
	if len(b)%PortLen != 0 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "port desc")
	}
	r.Ports = nil
	for ; len(b) > 0; b = b[PortLen:] {
		var p Port
		if err := p.UnmarshalBinary(b[:PortLen]); err != nil {
			return err
		}
		r.Ports = append(r.Ports, p)
	}
	return nil
}

// GroupStatsRequest is ofp_group_stats_request (8 bytes: 4 bytes group_id,
// GroupAll for all; 4 bytes pad).
type GroupStatsRequest struct{ GroupID uint32 }

// MultipartType returns MPGroup.
func (*GroupStatsRequest) MultipartType() MultipartType { return MPGroup }

// MarshalBinary encodes the request body.
func (r *GroupStatsRequest) MarshalBinary() ([]byte, error) {
	b := make([]byte, 8)
	be.PutUint32(b, r.GroupID)
	return b, nil
}

// UnmarshalBinary decodes the request body.
func (r *GroupStatsRequest) UnmarshalBinary(b []byte) error {
	if len(b) < 8 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "group stats request")
	}
	r.GroupID = be.Uint32(b)
	return nil
}

// BucketCounter is ofp_bucket_counter (16 bytes: 8 packet_count, 8 byte_count).
type BucketCounter struct{ PacketCount, ByteCount uint64 }

// GroupStats is one ofp_group_stats.
//
//	2 bytes: length of this entry
//	2 bytes: pad
//	4 bytes: group_id
//	4 bytes: ref_count, flows and groups forwarding to it
//	4 bytes: pad
//	8 bytes: packet_count
//	8 bytes: byte_count
//	4 bytes: duration_sec
//	4 bytes: duration_nsec
//	16 bytes each: bucket counters
type GroupStats struct {
	GroupID      uint32
	RefCount     uint32
	PacketCount  uint64
	ByteCount    uint64
	DurationSec  uint32
	DurationNsec uint32
	Buckets      []BucketCounter
}

// GroupStatsReply is the MPGroup reply body.
type GroupStatsReply struct{ Stats []GroupStats }

// MultipartType returns MPGroup.
func (*GroupStatsReply) MultipartType() MultipartType { return MPGroup }

// MarshalBinary encodes the entries.
func (r *GroupStatsReply) MarshalBinary() ([]byte, error) {
	var b []byte
	for _, s := range r.Stats {
		n := 40 + 16*len(s.Buckets)
		if n > 0xffff {
			return nil, errTooLong("group stats entry")
		}
		e := make([]byte, n)
		be.PutUint16(e, uint16(n))
		be.PutUint32(e[4:], s.GroupID)
		be.PutUint32(e[8:], s.RefCount)
		be.PutUint64(e[16:], s.PacketCount)
		be.PutUint64(e[24:], s.ByteCount)
		be.PutUint32(e[32:], s.DurationSec)
		be.PutUint32(e[36:], s.DurationNsec)
		for i, c := range s.Buckets {
			be.PutUint64(e[40+16*i:], c.PacketCount)
			be.PutUint64(e[48+16*i:], c.ByteCount)
		}
		b = append(b, e...)
	}
	return b, nil
}

// UnmarshalBinary decodes the entries.
func (r *GroupStatsReply) UnmarshalBinary(b []byte) error {
	r.Stats = nil
	for len(b) > 0 {
		n, err := entryLen(b, 40, "group stats")
		if err != nil {
			return err
		}
		if (n-40)%16 != 0 {
			return bad(ErrTypeBadRequest, BadRequestBadLen, "group stats entry length %d", n)
		}
		e := b[:n]
		s := GroupStats{GroupID: be.Uint32(e[4:]), RefCount: be.Uint32(e[8:]), PacketCount: be.Uint64(e[16:]),
			ByteCount: be.Uint64(e[24:]), DurationSec: be.Uint32(e[32:]), DurationNsec: be.Uint32(e[36:])}
		for i := 40; i < n; i += 16 {
			s.Buckets = append(s.Buckets, BucketCounter{be.Uint64(e[i:]), be.Uint64(e[i+8:])})
		}
		r.Stats = append(r.Stats, s)
		b = b[n:]
	}
	return nil
}

// GroupDesc is one ofp_group_desc.
//
//	2 bytes: length of this entry
//	1 byte:  type (GroupType*)
//	1 byte:  pad
//	4 bytes: group_id
//	rest:    buckets
type GroupDesc struct {
	GroupType uint8
	GroupID   uint32
	Buckets   []Bucket
}

// GroupDescReply is the MPGroupDesc reply body.
type GroupDescReply struct{ Groups []GroupDesc }

// MultipartType returns MPGroupDesc.
func (*GroupDescReply) MultipartType() MultipartType { return MPGroupDesc }

// MarshalBinary encodes the entries.
func (r *GroupDescReply) MarshalBinary() ([]byte, error) {
	var b []byte
	for _, g := range r.Groups {
		o := len(b)
		b = append(b, make([]byte, 8)...)
		b[o+2] = g.GroupType
		be.PutUint32(b[o+4:], g.GroupID)
		var err error
		if b, err = appendBuckets(b, g.Buckets); err != nil {
			return nil, err
		}
		if len(b)-o > 0xffff {
			return nil, errTooLong("group desc entry")
		}
		be.PutUint16(b[o:], uint16(len(b)-o))
	}
	return b, nil
}

// UnmarshalBinary decodes the entries.
func (r *GroupDescReply) UnmarshalBinary(b []byte) error {
	r.Groups = nil
	for len(b) > 0 {
		n, err := entryLen(b, 8, "group desc")
		if err != nil {
			return err
		}
		g := GroupDesc{GroupType: b[2], GroupID: be.Uint32(b[4:])}
		if g.Buckets, err = decodeBuckets(b[8:n]); err != nil {
			return err
		}
		r.Groups = append(r.Groups, g)
		b = b[n:]
	}
	return nil
}

// GroupFeaturesReply is ofp_group_features (40 bytes).
//
//	4 bytes: types, bitmap of GroupType* supported
//	4 bytes: capabilities (OFPGFC_*)
//	4×4 bytes: max_groups per type
//	4×4 bytes: actions per type, bitmap of ActionType (bits 0..31)
type GroupFeaturesReply struct {
	Types        uint32
	Capabilities uint32
	MaxGroups    [4]uint32
	Actions      [4]uint32
}

// MultipartType returns MPGroupFeatures.
func (*GroupFeaturesReply) MultipartType() MultipartType { return MPGroupFeatures }

// MarshalBinary encodes the 40 bytes.
func (r *GroupFeaturesReply) MarshalBinary() ([]byte, error) {
	b := make([]byte, 40)
	be.PutUint32(b, r.Types)
	be.PutUint32(b[4:], r.Capabilities)
	for i := range 4 {
		be.PutUint32(b[8+4*i:], r.MaxGroups[i])
		be.PutUint32(b[24+4*i:], r.Actions[i])
	}
	return b, nil
}

// UnmarshalBinary decodes the 40 bytes.
func (r *GroupFeaturesReply) UnmarshalBinary(b []byte) error {
	if len(b) < 40 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "group features")
	}
	r.Types, r.Capabilities = be.Uint32(b), be.Uint32(b[4:])
	for i := range 4 {
		r.MaxGroups[i], r.Actions[i] = be.Uint32(b[8+4*i:]), be.Uint32(b[24+4*i:])
	}
	return nil
}

// MeterFeaturesReply is ofp_meter_features (16 bytes); all zero means "no
// meters".
//
//	4 bytes: max_meter
//	4 bytes: band_types, bitmap of MeterBand* types
//	4 bytes: capabilities (OFPMF_*)
//	1 byte:  max_bands
//	1 byte:  max_color
//	2 bytes: pad
type MeterFeaturesReply struct {
	MaxMeter     uint32
	BandTypes    uint32
	Capabilities uint32
	MaxBands     uint8
	MaxColor     uint8
}

// MultipartType returns MPMeterFeatures.
func (*MeterFeaturesReply) MultipartType() MultipartType { return MPMeterFeatures }

// MarshalBinary encodes the 16 bytes.
func (r *MeterFeaturesReply) MarshalBinary() ([]byte, error) {
	b := make([]byte, 16)
	be.PutUint32(b, r.MaxMeter)
	be.PutUint32(b[4:], r.BandTypes)
	be.PutUint32(b[8:], r.Capabilities)
	b[12], b[13] = r.MaxBands, r.MaxColor
	return b, nil
}

// UnmarshalBinary decodes the 16 bytes.
func (r *MeterFeaturesReply) UnmarshalBinary(b []byte) error {
	if len(b) < 16 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "meter features")
	}
	*r = MeterFeaturesReply{be.Uint32(b), be.Uint32(b[4:]), be.Uint32(b[8:]), b[12], b[13]}
	return nil
}

// Validate checks a MULTIPART_REQUEST as a switch must: types it does not
// decode are OFPBRC_BAD_MULTIPART, flow and aggregate filters must carry
// a valid match, and the table must exist (OFPBRC_BAD_TABLE_ID above
// TableMax, except TableAll).
func (m *MultipartRequest) Validate() error {
	switch b := m.Body.(type) {
	case *RawBody:
		return bad(ErrTypeBadRequest, BadRequestBadMultipart, "multipart type %s", b.Type)
	case *FlowStatsRequest:
		return b.validate()
	case *AggregateStatsRequest:
		return (*FlowStatsRequest)(b).validate()
	}
	return nil
}

func (r *FlowStatsRequest) validate() error {
	if r.TableID > TableMax && r.TableID != TableAll {
		return bad(ErrTypeBadRequest, BadRequestBadTableID, "table %d", r.TableID)
	}
	return r.Match.Validate()
}

// SplitReply splits a reply whose body is a list (FLOW, TABLE, PORT_STATS,
// PORT_DESC, GROUP, GROUP_DESC, TABLE_FEATURES) into as many
// MULTIPART_REPLY messages as needed to keep each within MaxMessageLen;
// all but the last carry MultipartMore. Other replies come back as the one
// message. Every part keeps m's xid.
func SplitReply(m *MultipartReply) ([]*MultipartReply, error) {
	var n int
	var part func(i, j int) MultipartBody
	switch b := m.Body.(type) {
	case *FlowStatsReply:
		n, part = len(b.Stats), func(i, j int) MultipartBody { return &FlowStatsReply{Stats: b.Stats[i:j]} }
	case *TableStatsReply:
		n, part = len(b.Stats), func(i, j int) MultipartBody { return &TableStatsReply{Stats: b.Stats[i:j]} }
	case *PortStatsReply:
		n, part = len(b.Stats), func(i, j int) MultipartBody { return &PortStatsReply{Stats: b.Stats[i:j]} }
	case *PortDescReply:
		n, part = len(b.Ports), func(i, j int) MultipartBody { return &PortDescReply{Ports: b.Ports[i:j]} }
	case *GroupStatsReply:
		n, part = len(b.Stats), func(i, j int) MultipartBody { return &GroupStatsReply{Stats: b.Stats[i:j]} }
	case *GroupDescReply:
		n, part = len(b.Groups), func(i, j int) MultipartBody { return &GroupDescReply{Groups: b.Groups[i:j]} }
	case *MeterStatsReply:
		n, part = len(b.Stats), func(i, j int) MultipartBody { return &MeterStatsReply{Stats: b.Stats[i:j]} }
	case *MeterConfigReply:
		n, part = len(b.Configs), func(i, j int) MultipartBody { return &MeterConfigReply{Configs: b.Configs[i:j]} }
	case *TableFeaturesBody:
		n, part = len(b.Tables), func(i, j int) MultipartBody {
			return &TableFeaturesBody{Tables: b.Tables[i:j], Reply: b.Reply}
		}
	default:
		return []*MultipartReply{m}, nil
	}
	const room = MaxMessageLen - 16 // header and multipart header
	var out []*MultipartReply
	emit := func(i, j int) {
		out = append(out, &MultipartReply{MsgHeader: m.MsgHeader, Type: m.Type, Flags: m.Flags | MultipartMore, Body: part(i, j)})
	}
	start, size := 0, 0
	for i := range n {
		eb, err := part(i, i+1).MarshalBinary()
		if err != nil {
			return nil, err
		}
		if len(eb) > room {
			return nil, errTooLong(fmt.Sprintf("%s entry %d", m.Body.MultipartType(), i))
		}
		if size+len(eb) > room {
			emit(start, i)
			start, size = i, 0
		}
		size += len(eb)
	}
	emit(start, n)
	out[len(out)-1].Flags = m.Flags &^ MultipartMore
	return out, nil
}
