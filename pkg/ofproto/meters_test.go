package ofproto

import (
	"testing"

	"github.com/nagare-net/nagare/pkg/openflow"
)

func meterMod(cmd uint16, id uint32, flags uint16, bands ...openflow.MeterBand) *openflow.MeterMod {
	return &openflow.MeterMod{Command: cmd, MeterID: id, Flags: flags, Bands: bands}
}

// Meters: METER_MOD's errors, the meter instruction translated into a
// datapath meter action ahead of the rule's actions, and a meter's delete
// removing the flows that use it.
func TestMeters(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	drop := openflow.MeterBand{Type: openflow.MeterBandDrop, Rate: 1000}
	kbps := openflow.MeterFlagKbps
	if _, err := p.FlowMod(flowMod(t, openflow.FlowAdd, "actions=meter:1,output:2")); err == nil {
		t.Fatal("a flow with a missing meter was accepted")
	} else {
		wantErr(t, err, openflow.ErrTypeMeterModFailed, openflow.MeterModUnknownMeter)
	}
	if _, err := p.MeterMod(meterMod(openflow.MeterAdd, 1, kbps, drop)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mm   *openflow.MeterMod
		code uint16
	}{
		{meterMod(openflow.MeterAdd, 1, kbps, drop), openflow.MeterModMeterExists},
		{meterMod(openflow.MeterModify, 2, kbps, drop), openflow.MeterModUnknownMeter},
		{meterMod(openflow.MeterAdd, 3, kbps, drop, drop, drop, drop, drop), openflow.MeterModOutOfBands},
		{meterMod(openflow.MeterAdd, 3, kbps, openflow.MeterBand{Type: openflow.MeterBandExperimenter, Rate: 1}), openflow.MeterModBadBand},
		{meterMod(openflow.MeterAdd, openflow.MeterController, kbps, drop), openflow.MeterModInvalidMeter},
		{meterMod(openflow.MeterAdd, 3, kbps|openflow.MeterFlagPktps, drop), openflow.MeterModBadFlags},
	} {
		_, err := p.MeterMod(tc.mm)
		wantErr(t, err, openflow.ErrTypeMeterModFailed, tc.code)
	}
	mustAdd(t, p, "in_port=1,actions=set_field:00:00:00:00:00:09->eth_dst,meter:1,output:2")
	if got := actions(translate(t, p, tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2))); got != "meter(1),set(eth_dst=00:00:00:00:00:09),output:2" {
		t.Fatalf("actions %s: the meter runs before the rule's actions", got)
	}
	if ms, flows := p.Meters(openflow.MeterAll); len(ms) != 1 || flows[0] != 1 {
		t.Fatalf("meters %+v flows %v", ms, flows)
	}
	deleted, err := p.MeterMod(meterMod(openflow.MeterDelete, openflow.MeterAll, 0))
	if err != nil || len(deleted) != 1 || deleted[0] != 1 {
		t.Fatalf("delete: %v %v", deleted, err)
	}
	if got := actions(translate(t, p, tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2))); got != "drop" {
		t.Fatalf("the flow using the deleted meter still acts: %s", got)
	}
	if rm := p.Expire(); len(rm) != 1 || rm[0].Reason != openflow.FlowRemovedDelete {
		t.Fatalf("removed %+v, want the metered flow (reason DELETE)", rm)
	}
}
