package switchd

import (
	"testing"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// TestTableFeaturesMaskable: the match property marks the fields the spec
// makes maskable (a controller reading it would otherwise never mask
// ipv4_src or metadata), the wildcards property lists every field
// unmasked, and the set-field properties only what set_field can rewrite.
func TestTableFeaturesMaskable(t *testing.T) {
	s := &Switch{numTables: 2}
	props := map[uint16]map[uint32]bool{}
	for _, p := range s.tableFeatures()[0].Properties {
		props[p.Type] = map[uint32]bool{}
		for _, h := range p.OXMs {
			props[p.Type][h] = true
		}
	}
	for _, f := range []openflow.Field{openflow.FieldIPv4Src, openflow.FieldMetadata, openflow.FieldEthDst, openflow.FieldIPv6Dst,
		openflow.FieldVLANVID, openflow.FieldTunnelID, openflow.FieldARPSPA} {
		if !props[openflow.TFPMatch][openflow.OXMHeader(f, true)] || props[openflow.TFPMatch][openflow.OXMHeader(f, false)] {
			t.Errorf("match property: %s not advertised maskable", f)
		}
		if !props[openflow.TFPWildcards][openflow.OXMHeader(f, false)] {
			t.Errorf("wildcards property lacks %s", f)
		}
	}
	for _, f := range []openflow.Field{openflow.FieldInPort, openflow.FieldIPProto, openflow.FieldTCPDst} {
		if !props[openflow.TFPMatch][openflow.OXMHeader(f, false)] {
			t.Errorf("match property: %s not advertised exact", f)
		}
	}
	for f, want := range map[openflow.Field]bool{openflow.FieldSCTPDst: true, openflow.FieldIPv6NDTarget: true,
		openflow.FieldMPLSLabel: true, openflow.FieldInPort: false, openflow.FieldIPProto: false, openflow.FieldARPOp: false} {
		for _, typ := range []uint16{openflow.TFPApplySetField, openflow.TFPWriteSetField} {
			if got := props[typ][openflow.OXMHeader(f, false)]; got != want {
				t.Errorf("set-field property %d: %s advertised %v, want %v", typ, f, got, want)
			}
		}
	}
}
