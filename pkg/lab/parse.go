package lab

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// RTTResult is a sockperf ping-pong result converted to round-trip times.
//
// sockperf reports one-way latency, which it computes as RTT/2; every field
// here is that value multiplied by 2, comparable with netperf UDP_RR and the
// papers' round-trip figures.
type RTTResult struct {
	MinUs  float64 `json:"rtt_min_us"`
	AvgUs  float64 `json:"rtt_avg_us"`
	P50Us  float64 `json:"rtt_p50_us"`
	P90Us  float64 `json:"rtt_p90_us"`
	P99Us  float64 `json:"rtt_p99_us"`
	P999Us float64 `json:"rtt_p99_9_us"`
	MaxUs  float64 `json:"rtt_max_us"`
	// P50QuietUs is the least p50 over the run's half-second slices
	// (QuietP50): the data plane's own cost on a machine whose latency
	// moves in and out of slower periods of its own (docs/lab.md,
	// "Quiet p50"). 0 when the run had no full slice.
	P50QuietUs float64 `json:"rtt_p50_quiet_us,omitempty"`
	// QuietSlices is the number of slices P50QuietUs is the least of.
	QuietSlices int `json:"quiet_slices,omitempty"`
	// TransPerSec is completed round trips per second in the valid
	// (post-warm-up) window; one request is outstanding at a time.
	TransPerSec  float64 `json:"trans_per_s"`
	Observations int     `json:"observations"`
	// Sent and Received are the request messages sent and replies
	// received in the valid window (a lost request or reply is their
	// difference, give or take the one in flight).
	Sent     int `json:"sent"`
	Received int `json:"received"`
}

var (
	ansiRE        = regexp.MustCompile("\x1b\\[[0-9;]*m")
	sockValidRE   = regexp.MustCompile(`\[Valid Duration\] RunTime=([0-9.]+) sec; SentMessages=(\d+); ReceivedMessages=(\d+)`)
	sockAvgRE     = regexp.MustCompile(`avg-latency=([0-9.]+)`)
	sockPctRE     = regexp.MustCompile(`---> percentile\s+([0-9.]+)\s*=\s*([0-9.]+)`)
	sockMinMaxRE  = regexp.MustCompile(`---> <(MIN|MAX)> observation\s*=\s*([0-9.]+)`)
	sockObsRE     = regexp.MustCompile(`Total (\d+) observations`)
	sockNoReplyRE = regexp.MustCompile(`No messages were received`)
)

// ParseSockperf parses the output of `sockperf ping-pong` (version 3.x).
func ParseSockperf(out string) (RTTResult, error) {
	out = ansiRE.ReplaceAllString(out, "")
	var r RTTResult
	if sockNoReplyRE.MatchString(out) {
		return r, fmt.Errorf("sockperf: no replies from the server")
	}
	m := sockValidRE.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("sockperf: no [Valid Duration] line in output: %s", lastLines(out, 3))
	}
	secs, _ := strconv.ParseFloat(m[1], 64)
	recv, _ := strconv.ParseFloat(m[3], 64)
	r.Sent, _ = strconv.Atoi(m[2])
	r.Received, _ = strconv.Atoi(m[3])
	if secs > 0 {
		r.TransPerSec = recv / secs
	}
	if m := sockAvgRE.FindStringSubmatch(out); m != nil {
		v, _ := strconv.ParseFloat(m[1], 64)
		r.AvgUs = 2 * v
	} else {
		return r, fmt.Errorf("sockperf: no avg-latency in output")
	}
	if m := sockObsRE.FindStringSubmatch(out); m != nil {
		r.Observations, _ = strconv.Atoi(m[1])
	}
	pct := map[string]float64{}
	for _, m := range sockPctRE.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		pct[strings.TrimRight(strings.TrimRight(m[1], "0"), ".")] = 2 * v
	}
	for _, m := range sockMinMaxRE.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		if m[1] == "MIN" {
			r.MinUs = 2 * v
		} else {
			r.MaxUs = 2 * v
		}
	}
	for _, want := range []struct {
		key string
		dst *float64
	}{{"50", &r.P50Us}, {"90", &r.P90Us}, {"99", &r.P99Us}, {"99.9", &r.P999Us}} {
		v, ok := pct[want.key]
		if !ok {
			return r, fmt.Errorf("sockperf: percentile %s missing from output", want.key)
		}
		*want.dst = v
	}
	if r.MinUs == 0 || r.Observations == 0 {
		return r, fmt.Errorf("sockperf: no observations")
	}
	return r, nil
}

// QuietSlice is the length of the slices QuietP50 splits a run into, and
// minSliceObs the round trips a slice needs to count (a run's last slice
// is cut short).
const (
	QuietSlice  = 0.5 // seconds
	minSliceObs = 1000
)

// QuietP50 reads sockperf's --full-log (after a header line "packet,
// txTime(sec), rxTime(sec), latency(usec)", one line per round trip of
// the valid window: number, send time, receive time, one-way latency),
// splits the round trips into slices of QuietSlice by send time and
// returns the least of the slices' p50 RTTs (2 × one-way, as everywhere
// here) and the number of slices.
//
// Why: on the machines this lab runs on, a ping-pong's latency moves
// between a fast and a slow level by the second, whatever runs (a bare
// veth pair's p50 was 15.0–15.9 µs in some seconds of one client's run
// and 18.4–19.9 in others). A test's p50 then says as much about the
// share of slow seconds it met as about the data plane. Each slice's p50
// rests on thousands of round trips, so the quietest slice's is the data
// plane's cost in the machine's fast level, comparable between planes
// measured minutes apart.
func QuietP50(r io.Reader) (float64, int, error) {
	sc := bufio.NewScanner(r)
	var (
		started bool
		t0      float64
		slices  = map[int][]float64{}
	)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !started {
			started = strings.HasPrefix(line, "packet,")
			continue
		}
		f := strings.Split(line, ",")
		if len(f) != 4 {
			if strings.HasPrefix(line, "---") {
				break
			}
			continue
		}
		tx, err1 := strconv.ParseFloat(strings.TrimSpace(f[1]), 64)
		lat, err2 := strconv.ParseFloat(strings.TrimSpace(f[3]), 64)
		if err1 != nil || err2 != nil {
			return 0, 0, fmt.Errorf("sockperf full log: bad line %q", line)
		}
		if len(slices) == 0 {
			t0 = tx
		}
		k := int((tx - t0) / QuietSlice)
		slices[k] = append(slices[k], 2*lat)
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if !started {
		return 0, 0, fmt.Errorf("sockperf full log: no header line")
	}
	best, n := math.Inf(1), 0
	for _, v := range slices {
		if len(v) < minSliceObs {
			continue
		}
		n++
		best = math.Min(best, percentile(v, 50))
	}
	if n == 0 {
		return 0, 0, nil
	}
	return best, n, nil
}

// TCPResult is an iperf3 TCP test.
type TCPResult struct {
	// Gbps is the receiver's goodput (end.sum_received).
	Gbps        float64 `json:"gbps"`
	Retransmits int64   `json:"retransmits"`
}

// UDPResult is an iperf3 UDP flood.
type UDPResult struct {
	// RxPPS is packets delivered to the receiver per second (sent - lost).
	RxPPS float64 `json:"rx_pps"`
	// TxPPS is packets the sender sent per second.
	TxPPS   float64 `json:"tx_pps"`
	LossPct float64 `json:"loss_pct"`
	// RxMbps is the receiver's goodput in Mbit/s (UDP payload).
	RxMbps float64 `json:"rx_mbps"`
}

type iperfSum struct {
	Seconds       float64 `json:"seconds"`
	Bytes         float64 `json:"bytes"`
	BitsPerSecond float64 `json:"bits_per_second"`
	Retransmits   int64   `json:"retransmits"`
	Packets       float64 `json:"packets"`
	LostPackets   float64 `json:"lost_packets"`
	LostPercent   float64 `json:"lost_percent"`
}

type iperfJSON struct {
	Error string `json:"error"`
	Start struct {
		TestStart struct {
			Protocol string `json:"protocol"`
		} `json:"test_start"`
	} `json:"start"`
	End struct {
		SumSent     *iperfSum `json:"sum_sent"`
		SumReceived *iperfSum `json:"sum_received"`
		Sum         *iperfSum `json:"sum"`
	} `json:"end"`
}

func decodeIperf(out string) (iperfJSON, error) {
	var j iperfJSON
	// iperf3 may print warnings before the JSON object.
	if i := strings.IndexByte(out, '{'); i > 0 {
		out = out[i:]
	}
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		return j, fmt.Errorf("iperf3: bad JSON output: %w: %s", err, lastLines(out, 3))
	}
	if j.Error != "" {
		return j, fmt.Errorf("iperf3: %s", j.Error)
	}
	return j, nil
}

// ParseIperfTCP parses `iperf3 -c ... -J` TCP output.
func ParseIperfTCP(out string) (TCPResult, error) {
	j, err := decodeIperf(out)
	if err != nil {
		return TCPResult{}, err
	}
	if p := j.Start.TestStart.Protocol; p != "TCP" {
		return TCPResult{}, fmt.Errorf("iperf3: protocol %q, want TCP", p)
	}
	if j.End.SumReceived == nil || j.End.SumSent == nil {
		return TCPResult{}, fmt.Errorf("iperf3: no end.sum_received/sum_sent")
	}
	return TCPResult{Gbps: j.End.SumReceived.BitsPerSecond / 1e9, Retransmits: j.End.SumSent.Retransmits}, nil
}

// ParseIperfUDP parses `iperf3 -u -c ... -J` output.
func ParseIperfUDP(out string) (UDPResult, error) {
	j, err := decodeIperf(out)
	if err != nil {
		return UDPResult{}, err
	}
	if p := j.Start.TestStart.Protocol; p != "UDP" {
		return UDPResult{}, fmt.Errorf("iperf3: protocol %q, want UDP", p)
	}
	rx, tx := j.End.SumReceived, j.End.SumSent
	if rx == nil { // iperf3 < 3.11 only has end.sum
		rx = j.End.Sum
	}
	if tx == nil {
		tx = j.End.Sum
	}
	if rx == nil || tx == nil || rx.Seconds <= 0 || tx.Seconds <= 0 {
		return UDPResult{}, fmt.Errorf("iperf3: no UDP summary")
	}
	return UDPResult{
		RxPPS:   (rx.Packets - rx.LostPackets) / rx.Seconds,
		TxPPS:   tx.Packets / tx.Seconds,
		LossPct: rx.LostPercent,
		RxMbps:  rx.BitsPerSecond / 1e6,
	}, nil
}

// StressResult is the stress-ng --metrics-brief line of one stressor.
type StressResult struct {
	Stressor    string  `json:"stressor"`
	BogoOps     float64 `json:"bogo_ops"`
	RealSeconds float64 `json:"real_s"`
	// CPUSeconds is usr+sys time of all its workers.
	CPUSeconds float64 `json:"cpu_s"`
}

var stressRE = regexp.MustCompile(`metrc: \[\d+\]\s+([a-z][a-z0-9-]*)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+[0-9.]+`)

// ParseStressNG parses `stress-ng --metrics-brief` output; it fails unless
// stress-ng says the run completed.
func ParseStressNG(out string) ([]StressResult, error) {
	var rs []StressResult
	for _, m := range stressRE.FindAllStringSubmatch(out, -1) {
		f := func(i int) float64 { v, _ := strconv.ParseFloat(m[i], 64); return v }
		rs = append(rs, StressResult{Stressor: m[1], BogoOps: f(2), RealSeconds: f(3), CPUSeconds: f(4) + f(5)})
	}
	if !strings.Contains(out, "successful run completed") {
		return rs, fmt.Errorf("stress-ng: run not completed: %s", lastLines(out, 3))
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("stress-ng: no metrics lines (need --metrics-brief)")
	}
	return rs, nil
}
