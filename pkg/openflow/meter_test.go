package openflow

import (
	"errors"
	"io"
	"reflect"
	"testing"
)

// TestMeterRepliesRoundTrip: METER and METER_CONFIG replies encode and
// decode to the same values, and a cut-off entry is an error, not a panic.
func TestMeterRepliesRoundTrip(t *testing.T) {
	for i, body := range []MultipartBody{
		&MeterStatsReply{Stats: []MeterStats{{MeterID: 1, FlowCount: 2, PacketInCount: 3, ByteInCount: 4, DurationSec: 5, DurationNsec: 6,
			Bands: []MeterBandStats{{7, 8}, {9, 10}}}, {MeterID: 2}}},
		&MeterConfigReply{Configs: []MeterConfig{{Flags: MeterFlagKbps | MeterFlagBurst, MeterID: 1,
			Bands: []MeterBand{{Type: MeterBandDrop, Rate: 1000, BurstSize: 100}, {Type: MeterBandDSCPRemark, Rate: 2000, PrecLevel: 2}}}}},
	} {
		m := &MultipartReply{MsgHeader: MsgHeader{Xid: 9}, Type: body.MultipartType(), Body: body}
		raw, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		got, err := Unmarshal(raw)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.(*MultipartReply).Body, body) {
			t.Fatalf("%s: got %+v, want %+v", body.MultipartType(), got.(*MultipartReply).Body, body)
		}
		whole := map[int]bool{16: true, 16 + 72: i == 0} // entry boundaries: a shorter, valid reply
		for n := 16; n < len(raw); n++ {
			if whole[n] {
				continue
			}
			short := append([]byte(nil), raw[:n]...)
			be.PutUint16(short[2:], uint16(n))
			_, err := Unmarshal(short)
			var e *Error
			if err == nil {
				t.Fatalf("%s cut to %d bytes decoded without error", body.MultipartType(), n)
			} else if !errors.As(err, &e) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("%s cut to %d bytes: %v", body.MultipartType(), n, err)
			}
		}
	}
}
