package switchd

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMetersOnTheWire: meters added with ovs-ofctl (kbps and pktps, drop
// bands, burst) are dumped back by dump-meters and enforced in the fast
// path on real traffic: UDP sent at about five times each meter's rate
// arrives at the meter's rate within +-10 % (1 Mbit/s of frames; 100
// packets/s), and meter-stats counts what came in and what the band
// dropped.
func TestMetersOnTheWire(t *testing.T) {
	ts := startSwitch(t, 2, nil)
	ts.ofctl("add-meter", "meter=1,kbps,burst,stats,band=type=drop,rate=1000,burst_size=100")
	ts.ofctl("add-meter", "meter=2,pktps,burst,stats,band=type=drop,rate=100,burst_size=10")
	ts.ofctl("add-flow", "priority=10,in_port=1,udp,tp_dst=7001,actions=meter:1,output:2")
	ts.ofctl("add-flow", "priority=10,in_port=1,udp,tp_dst=7002,actions=meter:2,output:2")
	ts.ofctl("add-flow", "priority=1,actions=NORMAL")
	out := ts.ofctl("dump-meters")
	for _, want := range []string{"meter=1 kbps burst stats bands=", "type=drop rate=1000 burst_size=100",
		"meter=2 pktps burst stats bands=", "type=drop rate=100 burst_size=10"} {
		if !strings.Contains(out, want) {
			t.Fatalf("dump-meters lacks %q:\n%s", want, out)
		}
	}
	if out := ts.ofctl("meter-features"); !strings.Contains(out, "max_meter:4096 max_bands:4") ||
		!strings.Contains(out, "band_types: drop dscp_remark") || !strings.Contains(out, "capabilities: kbps pktps burst stats") {
		t.Fatalf("meter-features:\n%s", out)
	}
	if out := ts.ofctl("dump-flows"); !strings.Contains(out, "meter:1") {
		t.Fatalf("dump-flows lacks meter:1:\n%s", out)
	}

	const payload = 1000 // bytes of UDP payload; frames are 1042 bytes
	const window = 3 * time.Second
	type result struct {
		sent, got int
		rate      float64 // frames/s in the window
	}
	res := map[int]*result{}
	var wg sync.WaitGroup
	for _, m := range []struct {
		port   int
		sendPS float64
	}{{7001, 600}, {7002, 500}} { // 1 Mbit/s of 1042-byte frames is 120/s
		r := &result{}
		res[m.port] = r
		var conn *net.UDPConn
		var err error
		ts.Pods[1].In(t, func() { conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(podIP(2)), Port: m.port}) })
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var snd net.Conn
		ts.Pods[0].In(t, func() { snd, err = net.Dial("udp4", net.JoinHostPort(podIP(2), strconv.Itoa(m.port))) })
		if err != nil {
			t.Fatal(err)
		}
		defer snd.Close()
		start := time.Now()
		// The first half second drains the burst; the window after it
		// sees the steady rate.
		from, to := start.Add(500*time.Millisecond), start.Add(500*time.Millisecond+window)
		wg.Add(2)
		go func() {
			defer wg.Done()
			b := make([]byte, payload)
			for now := time.Now(); now.Before(to.Add(200 * time.Millisecond)); now = time.Now() {
				for float64(r.sent) < now.Sub(start).Seconds()*m.sendPS {
					if _, err := snd.Write(b); err == nil {
						r.sent++
					}
				}
				time.Sleep(time.Millisecond)
			}
		}()
		go func() {
			defer wg.Done()
			b := make([]byte, 2048)
			n := 0
			_ = conn.SetReadDeadline(to.Add(2 * time.Second))
			for {
				if _, err := conn.Read(b); err != nil {
					break
				}
				r.got++
				if now := time.Now(); now.After(from) && now.Before(to) {
					n++
				}
			}
			r.rate = float64(n) / window.Seconds()
		}()
	}
	wg.Wait()
	for port, want := range map[int]float64{7001: 1e6 / ((payload + 42) * 8), 7002: 100} {
		r := res[port]
		t.Logf("port %d: sent %d, received %d, %.1f frames/s in the window (meter: %.1f/s)", port, r.sent, r.got, r.rate, want)
		if r.rate < want*0.9 || r.rate > want*1.1 {
			t.Errorf("port %d: %.1f frames/s through the meter, want %.1f +-10%%", port, r.rate, want)
		}
		if float64(r.sent)/(window.Seconds()+0.7) < want*3 {
			t.Errorf("port %d: the sender managed only %d datagrams: no test of the meter", port, r.sent)
		}
	}
	st := ts.ofctl("meter-stats")
	for id, port := range map[int]int{1: 7001, 2: 7002} {
		re := regexp.MustCompile(fmt.Sprintf(`meter:%d flow_count:1 packet_in_count:(\d+) byte_in_count:\d+ duration:[0-9.]+s bands:\s*0: packet_count:(\d+)`, id))
		mm := re.FindStringSubmatch(st)
		if mm == nil {
			t.Fatalf("meter-stats lacks meter %d:\n%s", id, st)
		}
		in, _ := strconv.Atoi(mm[1])
		dropped, _ := strconv.Atoi(mm[2])
		r := res[port]
		if in != r.sent || in-dropped != r.got {
			t.Errorf("meter %d: packet_in_count %d, band drops %d; sent %d, received %d", id, in, dropped, r.sent, r.got)
		}
	}
}
