package pktgen

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// ReadyMarker is printed by `recv` once its sockets are bound.
const ReadyMarker = "pktgen: receiving"

// SendMarker is printed (on stderr) by `send` once its socket is open.
const SendMarker = "pktgen: sending"

// Main is `nagarectl lab pktgen send|recv ...`, run inside a pod's
// namespace. Each writes a JSON report (SendReport, RecvReport) to --out,
// or to stdout without --out.
func Main(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("want send or recv")
	}
	switch args[0] {
	case "send":
		return mainSend(args[1:], stdout)
	case "recv":
		return mainRecv(args[1:], stdout)
	}
	return fmt.Errorf("unknown pktgen mode %q (want send or recv)", args[0])
}

func writeReport(path string, stdout io.Writer, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if path == "" {
		_, err = stdout.Write(data)
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

func mainSend(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("pktgen send", flag.ContinueOnError)
	dev := fs.String("dev", "eth0", "interface to send on")
	dstMAC := fs.String("dst-mac", "", "destination MAC (the receiving pod's eth0)")
	srcIP := fs.String("src-ip", "", "source IPv4 address")
	dstIP := fs.String("dst-ip", "", "destination IPv4 address")
	flows := fs.Int("flows", 10000, "number of flows (one packet each)")
	dport := fs.Uint("dst-port", DefaultDstPort, "first destination port")
	rate := fs.Float64("rate", 0, "packets per second (0 = as fast as possible)")
	frameLen := fs.Int("frame-len", 64, "Ethernet frame length without FCS")
	batch := fs.Int("batch", 32, "frames per sendmmsg call")
	out := fs.String("out", "", "write the JSON report here (default stdout)")
	pattern := fs.String("pattern", PatternFlows, "flows (one packet per flow of --flows), random (never-repeating random 5-tuples), tse (tuple-space explosion around src-ip, dst-ip, dst-port) or scan (dst-ip's ports 1-65535 in turn); random, tse and scan run for --duration")
	duration := fs.Duration("duration", 10*time.Second, "how long random and tse send")
	if err := fs.Parse(args); err != nil {
		return err
	}
	mac, err := net.ParseMAC(*dstMAC)
	if err != nil {
		return fmt.Errorf("--dst-mac: %w", err)
	}
	src, dst := net.ParseIP(*srcIP), net.ParseIP(*dstIP)
	if src == nil || dst == nil {
		return fmt.Errorf("--src-ip %q / --dst-ip %q: want IPv4 addresses", *srcIP, *dstIP)
	}
	if *dport == 0 || *dport > 65535 {
		return fmt.Errorf("--dst-port %d out of range", *dport)
	}
	s, err := OpenSender(*dev)
	if err != nil {
		return err
	}
	defer s.Close()
	c := SendConfig{Dev: *dev, DstMAC: mac, SrcIP: src, DstIP: dst, Space: FlowSpace{Flows: *flows, DstPortBase: uint16(*dport)},
		Rate: *rate, FrameLen: *frameLen, Batch: *batch}
	fmt.Fprintln(os.Stderr, SendMarker)
	var rep SendReport
	if *pattern == PatternFlows {
		rep, err = s.Send(c, NewPacer(RealClock(), c.Rate, c.Batch))
	} else {
		rep, err = s.Attack(AttackConfig{SendConfig: c, Pattern: *pattern, Duration: *duration}, NewPacer(RealClock(), c.Rate, c.Batch))
	}
	if err != nil {
		return err
	}
	return writeReport(*out, stdout, rep)
}

func mainRecv(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("pktgen recv", flag.ContinueOnError)
	flows := fs.Int("flows", 10000, "number of flows expected")
	dport := fs.Uint("dst-port", DefaultDstPort, "first destination port")
	idle := fs.Duration("idle", time.Second, "stop after this long without packets")
	timeout := fs.Duration("timeout", time.Minute, "stop after this long in any case")
	rcvbuf := fs.Int("rcvbuf", 64<<20, "receive buffer per socket (bytes)")
	out := fs.String("out", "", "write the JSON report here (default stdout)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dport == 0 || *dport > 65535 {
		return fmt.Errorf("--dst-port %d out of range", *dport)
	}
	r, err := OpenReceiver(RecvConfig{Space: FlowSpace{Flows: *flows, DstPortBase: uint16(*dport)}, Idle: *idle, Timeout: *timeout, RcvBuf: *rcvbuf})
	if err != nil {
		return err
	}
	defer r.Close()
	stop := make(chan struct{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	go func() {
		if _, ok := <-sig; ok {
			close(stop)
		}
	}()
	fmt.Fprintln(stdout, ReadyMarker)
	rep, err := r.Run(stop)
	if err != nil {
		return err
	}
	return writeReport(*out, stdout, rep)
}
