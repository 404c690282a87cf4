package datapath

import (
	"strings"
	"testing"

	"github.com/nagare-net/nagare/pkg/flow"
)

// TestMeterDropBand: a 1 packet/s meter with a burst of 10 passes the
// first 10 of 50 back-to-back packets (the loop takes far less than the
// second a token needs, even on a loaded machine) and drops the rest,
// counted by the meter, its band and the meter drop reason.
func TestMeterDropBand(t *testing.T) {
	d := newTestDP(t)
	if err := d.SetMeter(7, MeterConfig{PPS: true, Bands: []MeterBand{{Kind: MeterBandDrop, Rate: 1, Burst: 10}}}); err != nil {
		t.Fatal(err)
	}
	d.put(inPortFlow(flow.Meter{ID: 7}, flow.Output{Port: portOut}))
	pkt := udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 2, "metered")
	passed := 0
	for range 50 {
		if r := d.run(pkt, "lo"); r.verdict == tcActRedirect {
			passed++
		}
	}
	if passed != 10 {
		t.Fatalf("%d of 50 passed, want the burst of 10", passed)
	}
	st, err := d.MeterStats(7)
	if err != nil {
		t.Fatal(err)
	}
	if st.Packets != 50 || len(st.Bands) != 1 || st.Bands[0].Packets != uint64(50-passed) {
		t.Fatalf("stats %+v, want 50 in and %d dropped by the band", st, 50-passed)
	}
	if got := d.drops()[DropMeter]; got != uint64(50-passed) {
		t.Fatalf("meter drops %d, want %d", got, 50-passed)
	}
	// A modify refills the buckets and keeps the counters.
	if err := d.SetMeter(7, MeterConfig{PPS: true, Bands: []MeterBand{{Kind: MeterBandDrop, Rate: 1, Burst: 3}}}); err != nil {
		t.Fatal(err)
	}
	if st, _ := d.MeterStats(7); st.Packets != 50 {
		t.Fatalf("counters lost on modify: %+v", st)
	}
	if r := d.run(pkt, "lo"); r.verdict != tcActRedirect {
		t.Fatalf("after modify: verdict %d, want a refilled bucket", r.verdict)
	}
}

// TestMeterDSCPRemarkBand: over its rate, a DSCP_REMARK band raises the AF
// drop precedence (AF11 → AF12 with prec_level 1) and forwards; the band
// with the highest exceeded rate acts when several are exceeded.
func TestMeterDSCPRemarkBand(t *testing.T) {
	d := newTestDP(t)
	// kbit/s buckets hold at least one 1514-byte frame: 12112 bits, so
	// a 400-byte frame fits three times; at 1 kbit/s a fourth takes 3 s.
	if err := d.SetMeter(1, MeterConfig{Bands: []MeterBand{{Kind: MeterBandDSCPRemark, Rate: 1, Burst: 1, PrecLevel: 1}}}); err != nil {
		t.Fatal(err)
	}
	d.put(inPortFlow(flow.Meter{ID: 1}, flow.Output{Port: portOut}))
	payload := string(make([]byte, 400-42))
	pkt := udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 2, payload)
	pkt[15] = 10 << 2 // AF11
	checksumFix(pkt)
	var dscps []byte
	for range 6 {
		r := d.run(pkt, "lo")
		if r.verdict != tcActRedirect {
			t.Fatalf("verdict %d: a remark band must not drop", r.verdict)
		}
		dscps = append(dscps, r.out[15]>>2)
		checksumsOK(t, r.out)
	}
	want := []byte{10, 10, 10, 12, 12, 12}
	if string(dscps) != string(want) {
		t.Fatalf("DSCPs %v, want %v", dscps, want)
	}
	// Two bands exceeded: the higher rate's (drop) acts, not the remark.
	if err := d.SetMeter(2, MeterConfig{PPS: true, Bands: []MeterBand{
		{Kind: MeterBandDSCPRemark, Rate: 1, Burst: 1, PrecLevel: 2}, {Kind: MeterBandDrop, Rate: 2, Burst: 2}}}); err != nil {
		t.Fatal(err)
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	d.put(inPortFlow(flow.Meter{ID: 2}, flow.Output{Port: portOut}))
	var got []string
	for range 4 {
		r := d.run(pkt, "lo")
		switch {
		case r.verdict != tcActRedirect:
			got = append(got, "drop")
		case r.out[15]>>2 == 10:
			got = append(got, "pass")
		default:
			got = append(got, "remark")
		}
	}
	if s := strings.Join(got, ","); s != "pass,remark,drop,drop" {
		t.Fatalf("verdicts %s, want pass,remark,drop,drop", s)
	}
}
