package ctlproto

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// lineServer serves the control protocol's framing as the switch does
// (pkg/switchd serveControl: any number of requests per connection, one
// response line each): "fail" gets a not-OK response, "slow" waits, any
// other command an OK. drop closes every open connection (a restarted
// switch).
type lineServer struct {
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
	seen  map[string]int
}

func newLineServer(t *testing.T) *lineServer {
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "ctl.sock"))
	if err != nil {
		t.Fatal(err)
	}
	s := &lineServer{l: l, seen: map[string]int{}}
	t.Cleanup(func() { l.Close(); s.drop() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			go s.serve(c)
		}
	}()
	return s
}

func (s *lineServer) serve(c net.Conn) {
	sc := bufio.NewScanner(c)
	enc := json.NewEncoder(c)
	for sc.Scan() {
		var req Request
		_ = json.Unmarshal(sc.Bytes(), &req)
		s.mu.Lock()
		s.seen[req.Cmd]++
		s.mu.Unlock()
		resp := Response{OK: true, Lines: []string{req.Cmd}}
		switch req.Cmd {
		case "fail":
			resp = Response{Error: "refused"}
		case "slow":
			time.Sleep(200 * time.Millisecond)
		}
		if enc.Encode(resp) != nil {
			return
		}
	}
}

func (s *lineServer) drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
	s.conns = nil
}

func (s *lineServer) client() *Client {
	return &Client{Dial: func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", s.l.Addr().String())
	}}
}

// TestClientKeepsConnections: calls one after the other share one
// connection, an error response keeps it, concurrent calls get their own
// and at most MaxIdle stay; a connection the switch closed (restart) is
// replaced and the call sent once more; a call that times out is not.
func TestClientKeepsConnections(t *testing.T) {
	s := newLineServer(t)
	cl := s.client()
	defer cl.Close()
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		resp, err := cl.Call(ctx, Request{Cmd: "show"})
		if err != nil || resp.Lines[0] != "show" {
			t.Fatalf("call %d: %v %v", i, resp, err)
		}
	}
	if _, err := cl.Call(ctx, Request{Cmd: "fail"}); err == nil || !strings.Contains(err.Error(), "fail: refused") {
		t.Fatalf("a refused request: %v", err)
	}
	if _, err := cl.Call(ctx, Request{Cmd: "show"}); err != nil {
		t.Fatal(err)
	}
	if n := cl.Dials(); n != 1 {
		t.Fatalf("12 calls one after the other dialled %d connections, want 1", n)
	}

	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := cl.Call(ctx, Request{Cmd: "slow"}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	cl.mu.Lock()
	idle := len(cl.idle)
	cl.mu.Unlock()
	if d := cl.Dials(); d < 2 || idle != 4 {
		t.Fatalf("8 concurrent calls: %d dials, %d idle (want several, and 4 kept)", d, idle)
	}

	s.drop() // the switch restarts: every kept connection is closed
	before := cl.Dials()
	if resp, err := cl.Call(ctx, Request{Cmd: "after-restart"}); err != nil || resp.Lines[0] != "after-restart" {
		t.Fatalf("call after the switch closed its connections: %v %v", resp, err)
	}
	if cl.Dials() != before+1 {
		t.Fatalf("dials %d → %d, want one new connection", before, cl.Dials())
	}
	s.mu.Lock()
	n := s.seen["after-restart"]
	s.mu.Unlock()
	if n != 1 {
		t.Fatalf("the switch saw the request %d times, want once", n)
	}

	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := cl.Call(tctx, Request{Cmd: "slow"}); err == nil {
		t.Fatal("a call past its deadline succeeded")
	}
	// The server counts a request when it reads it; a second send
	// would come at once, with the first (the call retries before it
	// returns), so the count is final when it reaches 9.
	var slow int
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		s.mu.Lock()
		slow = s.seen["slow"]
		s.mu.Unlock()
		if slow >= 9 {
			break
		}
	}
	if slow != 9 {
		t.Fatalf("slow requests seen %d, want 9 (a timed-out call is not sent again)", slow)
	}
	if _, err := cl.Call(ctx, Request{Cmd: "show"}); err != nil {
		t.Fatalf("a call after a timed-out one: %v", err)
	}
}
