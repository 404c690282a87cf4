package lab

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func TestParseSockperfDoublesOneWayToRTT(t *testing.T) {
	// testdata/sockperf-pingpong-cross.txt is real sockperf 3.7 output
	// (client CPU 0, server CPU 1) with ANSI colour codes left in.
	r, err := ParseSockperf(readTestdata(t, "sockperf-pingpong-cross.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := RTTResult{
		MinUs: 2 * 7.821, AvgUs: 2 * 31.146, P50Us: 2 * 30.985, P90Us: 2 * 34.426, P99Us: 2 * 56.513,
		P999Us: 2 * 209.370, MaxUs: 2 * 1942.080, TransPerSec: 24880 / 1.550, Observations: 24880,
	}
	if !near(r.MinUs, want.MinUs) || !near(r.AvgUs, want.AvgUs) || !near(r.P50Us, want.P50Us) ||
		!near(r.P90Us, want.P90Us) || !near(r.P99Us, want.P99Us) || !near(r.P999Us, want.P999Us) ||
		!near(r.MaxUs, want.MaxUs) || !near(r.TransPerSec, want.TransPerSec) || r.Observations != want.Observations {
		t.Errorf("got  %+v\nwant %+v", r, want)
	}
}

func TestParseSockperfSameCore(t *testing.T) {
	r, err := ParseSockperf(readTestdata(t, "sockperf-pingpong-same.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !near(r.P50Us, 2*5.508) || !near(r.MinUs, 2*5.252) {
		t.Errorf("p50 %v min %v, want %v %v", r.P50Us, r.MinUs, 2*5.508, 2*5.252)
	}
	if !(r.MinUs <= r.P50Us && r.P50Us <= r.P90Us && r.P90Us <= r.P99Us && r.P99Us <= r.MaxUs) {
		t.Errorf("percentiles not ordered: %+v", r)
	}
}

func TestParseSockperfErrors(t *testing.T) {
	if _, err := ParseSockperf(readTestdata(t, "sockperf-noreply.txt")); err == nil || !strings.Contains(err.Error(), "no replies") {
		t.Errorf("no-reply output: err = %v, want 'no replies'", err)
	}
	full := readTestdata(t, "sockperf-pingpong-cross.txt")
	cut := strings.Split(full, "percentile 90.000")[0]
	if _, err := ParseSockperf(cut); err == nil || !strings.Contains(err.Error(), "percentile") {
		t.Errorf("truncated output: err = %v, want missing percentile", err)
	}
	if _, err := ParseSockperf(""); err == nil {
		t.Error("empty output parsed without error")
	}
}

func TestParseIperfTCP(t *testing.T) {
	r, err := ParseIperfTCP(readTestdata(t, "iperf3-tcp.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !near(r.Gbps, 19986459941.2521/1e9) || r.Retransmits != 73003 {
		t.Errorf("got %+v, want 19.986 Gbit/s (receiver) and 73003 retransmits", r)
	}
	if _, err := ParseIperfTCP(readTestdata(t, "iperf3-udp64.json")); err == nil {
		t.Error("UDP output accepted as TCP")
	}
}

func TestParseIperfUDP(t *testing.T) {
	r, err := ParseIperfUDP(readTestdata(t, "iperf3-udp64.json"))
	if err != nil {
		t.Fatal(err)
	}
	wantRx := (493890.0 - 1541) / 2.000115
	wantTx := 493890 / 2.000036
	wantMbps := 31510336 * 8 / 2.000115 / 1e6 // sum_received: delivered bytes only
	if !near(r.RxPPS, wantRx) || !near(r.TxPPS, wantTx) || !near(r.LossPct, 0.3120127963716617) || !near(r.RxMbps, wantMbps) {
		t.Errorf("got %+v, want rx %.1f tx %.1f", r, wantRx, wantTx)
	}
}

func TestParseIperfError(t *testing.T) {
	_, err := ParseIperfTCP(readTestdata(t, "iperf3-error.json"))
	if err == nil || !strings.Contains(err.Error(), "unable to connect") {
		t.Errorf("err = %v, want iperf3's own error text", err)
	}
	if _, err := ParseIperfUDP("iperf3: error - bad"); err == nil {
		t.Error("non-JSON output accepted")
	}
}

func TestParseStressNG(t *testing.T) {
	out := readTestdata(t, "stress-ng-cpu.txt")
	rs, err := ParseStressNG(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Stressor != "cpu" || rs[0].BogoOps != 2573 || !near(rs[0].CPUSeconds, 1.23) {
		t.Errorf("got %+v", rs)
	}
	if _, err := ParseStressNG(strings.ReplaceAll(out, "successful run completed", "")); err == nil {
		t.Error("incomplete run accepted")
	}
}

func TestParseProcStat(t *testing.T) {
	ps, err := ParseProcStat(readTestdata(t, "proc-stat.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps.PerCPU) != 2 {
		t.Fatalf("%d CPUs, want 2", len(ps.PerCPU))
	}
	var busy uint64
	for _, c := range ps.PerCPU {
		busy += c.Busy()
	}
	// The aggregate line is the sum of the per-CPU lines.
	if d := int64(ps.Total.Busy()) - int64(busy); d < -2 || d > 2 {
		t.Errorf("aggregate busy %d, per-CPU sum %d", ps.Total.Busy(), busy)
	}
	if _, err := ParseProcStat("intr 1 2 3\n"); err == nil {
		t.Error("no cpu line accepted")
	}
}

func TestParsePIDStat(t *testing.T) {
	// Real layout; comm contains spaces and parentheses, utime 1234, stime 56.
	line := "4242 (ovs (vs) d) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 56 0 0 20 0 3 0 282147 3133440 388 18446744073709551615"
	v, err := ParsePIDStat(line)
	if err != nil || v != 1290 {
		t.Errorf("got %d, %v; want 1290", v, err)
	}
	if _, err := ParsePIDStat(readTestdata(t, "pid-stat.txt")); err != nil {
		t.Errorf("real /proc/self/stat: %v", err)
	}
	if _, err := ParsePIDStat("4242 (x) S 1"); err == nil {
		t.Error("short line accepted")
	}
}

func TestParsePerCPUCounters(t *testing.T) {
	s, err := ParsePerCPUCounters(readTestdata(t, "softirqs.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if s.CPUs != 2 || s.Rows["NET_RX"][0] != 1318024 || s.Rows["NET_RX"][1] != 1905220 {
		t.Errorf("NET_RX = %v", s.Rows["NET_RX"])
	}
	if sum := s.Sum(); sum[0] != 1597596 || sum[1] != 2162725 {
		t.Errorf("sum = %v, want [1597596 2162725]", sum)
	}
	in, err := ParsePerCPUCounters(readTestdata(t, "interrupts.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if in.Rows["LOC"][0] != 261559 || in.Rows["LOC"][1] != 124769 {
		t.Errorf("LOC = %v", in.Rows["LOC"])
	}
	// "ERR:          0" has one column only; description words are not counts.
	if len(in.Rows["ERR"]) != 2 || in.Rows["24"][0] != 1 || in.Rows["24"][1] != 0 {
		t.Errorf("ERR = %v, 24 = %v", in.Rows["ERR"], in.Rows["24"])
	}
}

func TestUsageBetween(t *testing.T) {
	a := cpuSnapshot{
		stat:     ProcStat{Total: CPUTimes{User: 100, Idle: 1000}, PerCPU: []CPUTimes{{User: 50, Idle: 500}, {User: 50, Idle: 500}}},
		pidTicks: map[int]uint64{7: 10},
		softirqs: PerCPUCounters{CPUs: 2, Rows: map[string][]uint64{"NET_RX": {5, 5}, "TIMER": {1, 1}}},
	}
	b := cpuSnapshot{
		stat:     ProcStat{Total: CPUTimes{User: 250, SoftIRQ: 50, Idle: 1100}, PerCPU: []CPUTimes{{User: 150, Idle: 500}, {User: 100, SoftIRQ: 50, Idle: 600}}},
		pidTicks: map[int]uint64{7: 60},
		softirqs: PerCPUCounters{CPUs: 2, Rows: map[string][]uint64{"NET_RX": {15, 105}, "TIMER": {2, 1}}},
	}
	u := usageBetween(a, b, 1)
	if !near(u.SwitchCPUSeconds, 0.5) || !near(u.HostCPUSeconds, 2.0) {
		t.Errorf("switch %v host %v, want 0.5 2.0", u.SwitchCPUSeconds, u.HostCPUSeconds)
	}
	if !near(u.HostBusyPerCPU[0], 1.0) || !near(u.HostBusyPerCPU[1], 0.5) {
		t.Errorf("busy per CPU %v, want [1 0.5]", u.HostBusyPerCPU)
	}
	if len(u.NetRxPerCPU) != 2 || u.NetRxPerCPU[0] != 10 || u.NetRxPerCPU[1] != 100 {
		t.Errorf("NET_RX per CPU %v, want [10 100]", u.NetRxPerCPU)
	}
	if u.NetRxSoftirqs != 110 || u.Softirqs[0] != 11 || u.Softirqs[1] != 100 {
		t.Errorf("softirqs %v net_rx %d", u.Softirqs, u.NetRxSoftirqs)
	}
}

// TestQuietP50: the least of the half-second slices' p50s, a slice cut
// short left out; the preamble sockperf writes before its header skipped.
func TestQuietP50(t *testing.T) {
	var b strings.Builder
	b.WriteString(readTestdata(t, "sockperf-full-log-head.txt"))
	n := 0
	add := func(from float64, count int, oneWay func(i int) float64) {
		for i := range count {
			tx := from + float64(i)*QuietSlice/float64(count+1)
			fmt.Fprintf(&b, "%d, %.9f, %.9f, %.3f\n", n, tx, tx+2*oneWay(i)/1e6, oneWay(i))
			n++
		}
	}
	// Slow, fast (half at 7.0, half at 8.0 µs one-way: p50 14 µs RTT,
	// the lower middle), slow again, then a short last slice faster than all.
	add(100.0, 2000, func(int) float64 { return 10 })
	add(100.5, 2000, func(i int) float64 { return 7 + float64(i%2) })
	add(101.0, 2000, func(i int) float64 { return 9 + float64(i%3) })
	add(101.5, 50, func(int) float64 { return 1 })
	b.WriteString("------------------------------\n")
	p50, slices, err := QuietP50(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if slices != 3 || p50 != 14 {
		t.Errorf("quiet p50 %v over %d slices, want 14 (the fast slice's) over 3", p50, slices)
	}
	if _, _, err := QuietP50(strings.NewReader("0, 1.0, 1.1, 5.0\n")); err == nil {
		t.Error("a log without its header line: no error")
	}
	if _, _, err := QuietP50(strings.NewReader("packet, txTime(sec), rxTime(sec), latency(usec)\n0, x, 1.1, 5.0\n")); err == nil {
		t.Error("a bad line: no error")
	}
	if p, n, err := QuietP50(strings.NewReader("packet, txTime(sec), rxTime(sec), latency(usec)\n0, 1.0, 1.1, 5.0\n")); err != nil || n != 0 || p != 0 {
		t.Errorf("no full slice: %v %d %v, want 0 0 nil", p, n, err)
	}
}
