package openflow

// TABLE_FEATURES multipart body: what each flow table can match and do.

// Table feature property types (ofp_table_feature_prop_type).
const (
	TFPInstructions      uint16 = 0
	TFPInstructionsMiss  uint16 = 1
	TFPNextTables        uint16 = 2
	TFPNextTablesMiss    uint16 = 3
	TFPWriteActions      uint16 = 4
	TFPWriteActionsMiss  uint16 = 5
	TFPApplyActions      uint16 = 6
	TFPApplyActionsMiss  uint16 = 7
	TFPMatch             uint16 = 8
	TFPWildcards         uint16 = 10
	TFPWriteSetField     uint16 = 12
	TFPWriteSetFieldMiss uint16 = 13
	TFPApplySetField     uint16 = 14
	TFPApplySetFieldMiss uint16 = 15
	TFPExperimenter      uint16 = 0xfffe
	TFPExperimenterMiss  uint16 = 0xffff
)

// TypeID is an instruction or action id in a table feature property: the
// type, and for experimenter ids the bytes after the 4-byte header.
//
//	2 bytes: type
//	2 bytes: len (4, or more for experimenter ids)
//	len-4 bytes: experimenter-defined
type TypeID struct {
	Type uint16
	Exp  []byte
}

// TableFeatureProp is one ofp_table_feature_prop_*. Which slice is used
// depends on Type:
//
//	INSTRUCTIONS*:                 IDs (instruction ids)
//	NEXT_TABLES*:                  Tables, 1 byte each
//	WRITE/APPLY_ACTIONS*:          IDs (action ids)
//	MATCH, WILDCARDS, *_SETFIELD*: OXMs, 4-byte OXM headers (class<<16 | field<<9 | hasmask<<8 | len)
//	EXPERIMENTER*:                 Experimenter, ExpType, Data
//
// Every property is 2 bytes type, 2 bytes length (excluding padding), the
// payload, then zero padding to a multiple of 8.
type TableFeatureProp struct {
	Type         uint16
	IDs          []TypeID
	Tables       []uint8
	OXMs         []uint32
	Experimenter uint32
	ExpType      uint32
	Data         []byte
}

// OXMHeader returns the 4-byte OXM header of a basic field, as listed in
// MATCH/WILDCARDS/SETFIELD properties.
func OXMHeader(f Field, masked bool) uint32 {
	h := uint32(ClassOpenFlowBasic)<<16 | uint32(f)<<9 | uint32(f.Len())
	if masked {
		h = h&^0xff | 1<<8 | uint32(2*f.Len())
	}
	return h
}

// TableFeatures is one ofp_table_features.
//
//	2 bytes:  length of this entry, properties included
//	1 byte:   table_id
//	5 bytes:  pad
//	32 bytes: name, NUL-terminated
//	8 bytes:  metadata_match, bits of metadata the table can match
//	8 bytes:  metadata_write, bits of metadata the table can write
//	4 bytes:  config (deprecated)
//	4 bytes:  max_entries
//	rest:     properties
type TableFeatures struct {
	TableID       uint8
	Name          string
	MetadataMatch uint64
	MetadataWrite uint64
	Config        uint32
	MaxEntries    uint32
	Properties    []TableFeatureProp
}

// TableFeaturesBody is the TABLE_FEATURES body of a request (set the
// tables' features; empty to only ask) or of a reply. Reply only records
// which direction it was decoded from.
type TableFeaturesBody struct {
	Tables []TableFeatures
	Reply  bool
}

// MultipartType returns MPTableFeatures.
func (*TableFeaturesBody) MultipartType() MultipartType { return MPTableFeatures }

// MarshalBinary encodes the table entries.
func (t *TableFeaturesBody) MarshalBinary() ([]byte, error) {
	var b []byte
	for _, tf := range t.Tables {
		o := len(b)
		b = append(b, make([]byte, 64)...)
		e := b[o:]
		e[2] = tf.TableID
		putString(e[8:40], tf.Name)
		be.PutUint64(e[40:], tf.MetadataMatch)
		be.PutUint64(e[48:], tf.MetadataWrite)
		be.PutUint32(e[56:], tf.Config)
		be.PutUint32(e[60:], tf.MaxEntries)
		for _, p := range tf.Properties {
			po := len(b)
			b = append(b, 0, 0, 0, 0)
			be.PutUint16(b[po:], p.Type)
			switch p.Type {
			case TFPInstructions, TFPInstructionsMiss, TFPWriteActions, TFPWriteActionsMiss,
				TFPApplyActions, TFPApplyActionsMiss:
				for _, id := range p.IDs {
					b = be.AppendUint16(b, id.Type)
					b = be.AppendUint16(b, uint16(4+len(id.Exp)))
					b = append(b, id.Exp...)
				}
			case TFPNextTables, TFPNextTablesMiss:
				b = append(b, p.Tables...)
			case TFPMatch, TFPWildcards, TFPWriteSetField, TFPWriteSetFieldMiss,
				TFPApplySetField, TFPApplySetFieldMiss:
				for _, h := range p.OXMs {
					b = be.AppendUint32(b, h)
				}
			case TFPExperimenter, TFPExperimenterMiss:
				b = be.AppendUint32(b, p.Experimenter)
				b = be.AppendUint32(b, p.ExpType)
				b = append(b, p.Data...)
			default:
				b = append(b, p.Data...)
			}
			n := len(b) - po
			if n > 0xffff {
				return nil, errTooLong("table feature property")
			}
			be.PutUint16(b[po+2:], uint16(n))
			b = append(b, make([]byte, pad8(n)-n)...)
		}
		if len(b)-o > 0xffff {
			return nil, errTooLong("table features entry")
		}
		be.PutUint16(b[o:], uint16(len(b)-o))
	}
	return b, nil
}

// UnmarshalBinary decodes the table entries. Property problems are
// OFPET_TABLE_FEATURES_FAILED codes (BAD_LEN, BAD_TYPE... as the switch
// would send when a controller sets features).
func (t *TableFeaturesBody) UnmarshalBinary(b []byte) error {
	t.Tables = nil
	for len(b) > 0 {
		if len(b) < 64 {
			return short(ErrTypeTableFeaturesFailed, TableFeaturesBadLen, "table features")
		}
		n := int(be.Uint16(b))
		if n < 64 {
			return bad(ErrTypeTableFeaturesFailed, TableFeaturesBadLen, "table features length %d", n)
		}
		if n > len(b) {
			return short(ErrTypeTableFeaturesFailed, TableFeaturesBadLen, "table features")
		}
		e := b[:n]
		tf := TableFeatures{TableID: e[2], Name: getString(e[8:40]), MetadataMatch: be.Uint64(e[40:]),
			MetadataWrite: be.Uint64(e[48:]), Config: be.Uint32(e[56:]), MaxEntries: be.Uint32(e[60:])}
		p := e[64:]
		for len(p) > 0 {
			prop, k, err := decodeTableFeatureProp(p)
			if err != nil {
				return err
			}
			tf.Properties = append(tf.Properties, prop)
			p = p[k:]
		}
		t.Tables = append(t.Tables, tf)
		b = b[n:]
	}
	return nil
}

func decodeTableFeatureProp(b []byte) (TableFeatureProp, int, error) {
	var p TableFeatureProp
	if len(b) < 4 {
		return p, 0, short(ErrTypeTableFeaturesFailed, TableFeaturesBadLen, "property header")
	}
	p.Type = be.Uint16(b)
	n := int(be.Uint16(b[2:]))
	if n < 4 {
		return p, 0, bad(ErrTypeTableFeaturesFailed, TableFeaturesBadLen, "property length %d", n)
	}
	if pad8(n) > len(b) {
		return p, 0, short(ErrTypeTableFeaturesFailed, TableFeaturesBadLen, "property")
	}
	v := b[4:n]
	switch p.Type {
	case TFPInstructions, TFPInstructionsMiss, TFPWriteActions, TFPWriteActionsMiss,
		TFPApplyActions, TFPApplyActionsMiss:
		for len(v) > 0 {
			if len(v) < 4 {
				return p, 0, bad(ErrTypeTableFeaturesFailed, TableFeaturesBadLen, "truncated id")
			}
			k := int(be.Uint16(v[2:]))
			if k < 4 || k > len(v) {
				return p, 0, bad(ErrTypeTableFeaturesFailed, TableFeaturesBadLen, "id length %d", k)
			}
			id := TypeID{Type: be.Uint16(v)}
			if k > 4 {
				id.Exp = append([]byte{}, v[4:k]...)
			}
			p.IDs = append(p.IDs, id)
			v = v[k:]
		}
	case TFPNextTables, TFPNextTablesMiss:
		p.Tables = append([]uint8{}, v...)
	case TFPMatch, TFPWildcards, TFPWriteSetField, TFPWriteSetFieldMiss,
		TFPApplySetField, TFPApplySetFieldMiss:
		if len(v)%4 != 0 {
			return p, 0, bad(ErrTypeTableFeaturesFailed, TableFeaturesBadLen, "oxm id list of %d bytes", len(v))
		}
		for ; len(v) > 0; v = v[4:] {
			p.OXMs = append(p.OXMs, be.Uint32(v))
		}
	case TFPExperimenter, TFPExperimenterMiss:
		if len(v) < 8 {
			return p, 0, bad(ErrTypeTableFeaturesFailed, TableFeaturesBadLen, "experimenter property of %d bytes", n)
		}
		p.Experimenter, p.ExpType = be.Uint32(v), be.Uint32(v[4:])
		p.Data = append([]byte{}, v[8:]...)
	default:
		return p, 0, bad(ErrTypeTableFeaturesFailed, TableFeaturesBadType, "property type %d", p.Type)
	}
	return p, pad8(n), nil
}
