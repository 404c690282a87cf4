package cniserver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/nagare-net/nagare/pkg/unixsock"
)

// One call on the socket: the shim writes one JSON Request and a newline,
// the agent answers one JSON Response and a newline, then both close.

// CallTimeouts bound a call on the agent's side; the shim waits a little
// longer (see cmd/nagare-cni) before it gives up with "try again later".
var CallTimeouts = map[string]time.Duration{
	"ADD": 90 * time.Second, "DEL": 60 * time.Second, "CHECK": 30 * time.Second,
	"STATUS": 10 * time.Second, "GC": 120 * time.Second,
}

// Listen makes the Unix socket at path, mode 0600 from the first instant
// (the umask is narrowed around bind). A stale socket of a dead agent is
// replaced; a live one is refused.
func Listen(path string) (net.Listener, error) {
	if _, err := os.Lstat(path); err == nil {
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: another process is serving it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale %s: %w", path, err)
		}
	}
	return unixsock.Listen(path, 0o600, 0o700)
}

// Observer hears of every call served: its command, how long it took,
// and its CNI error code (0: success). The agent's Prometheus metrics are
// one; this package stays free of them, since the shim links it and its
// start-up is part of every CNI call.
type Observer interface {
	ObserveCall(command string, took time.Duration, code uint)
}

// Serve answers calls on l with h until l is closed or ctx ends.
func Serve(ctx context.Context, l net.Listener, h Handler, log *slog.Logger, m Observer) error {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			serveConn(ctx, c, h, log, m)
		}()
	}
}

func serveConn(ctx context.Context, c net.Conn, h Handler, log *slog.Logger, m Observer) {
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var resp Response
	var req Request
	if !sc.Scan() {
		return
	}
	start := time.Now()
	if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
		resp.Error = types.NewError(types.ErrDecodingFailure, "nagare: bad request from the shim: "+err.Error(), "")
	} else {
		timeout := CallTimeouts[req.Command]
		if timeout == 0 {
			timeout = time.Minute
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		resp = call(cctx, h, &req)
		cancel()
	}
	took := time.Since(start)
	l := log.With("cmd", req.Command, "pod", PodName(req.Args), "container", short(req.ContainerID), "took", took.Round(time.Microsecond))
	var code uint
	if resp.Error != nil {
		code = resp.Error.Code
		l.Warn("CNI call failed", "code", resp.Error.Code, "err", resp.Error.Msg, "details", resp.Error.Details)
	} else {
		l.Debug("CNI call")
	}
	if m != nil {
		m.ObserveCall(req.Command, took, code)
	}
	b, _ := json.Marshal(resp)
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, _ = c.Write(append(b, '\n'))
}

// call runs one request; a panic in the handler is an internal error, not
// a dead agent.
func call(ctx context.Context, h Handler, req *Request) (resp Response) {
	defer func() {
		if r := recover(); r != nil {
			resp = Response{Error: types.NewError(types.ErrInternal, fmt.Sprintf("nagare: agent panic: %v", r), string(debug.Stack()))}
		}
	}()
	var err error
	switch req.Command {
	case "ADD":
		var r types.Result
		if r, err = h.Add(ctx, req); err == nil {
			if r == nil {
				err = errors.New("no result")
			} else {
				resp.Result, err = json.Marshal(r)
			}
		}
	case "DEL":
		err = h.Del(ctx, req)
	case "CHECK":
		err = h.Check(ctx, req)
	case "GC":
		err = h.GC(ctx, req)
	case "STATUS":
		err = h.Status(ctx, req)
	default:
		err = types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("nagare: unknown command %q", req.Command), "")
	}
	if err != nil {
		resp.Result = nil
		resp.Error = AsCNIError(err)
	}
	return resp
}

// AsCNIError passes a *types.Error through and makes any other error an
// internal one (999) carrying its text.
func AsCNIError(err error) *types.Error {
	var te *types.Error
	if errors.As(err, &te) {
		return te
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return types.NewError(types.ErrTryAgainLater, "nagare: the agent timed out: "+err.Error(), "")
	}
	return types.NewError(types.ErrInternal, "nagare: "+err.Error(), "")
}

// Call sends one request to the agent at socket and returns its response.
// An agent that is not there (no socket, refused) or does not answer in
// time is a "try again later" (code 11) error, never a hang.
func Call(ctx context.Context, socket string, req *Request) (*Response, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, types.NewError(types.ErrTryAgainLater, fmt.Sprintf("nagare: the node agent is not reachable at %s (is nagare-agent running?)", socket), err.Error())
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(append(b, '\n')); err != nil {
		return nil, types.NewError(types.ErrTryAgainLater, "nagare: the node agent closed the connection", err.Error())
	}
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	if !sc.Scan() {
		why := "closed the connection"
		switch err := sc.Err(); {
		case errors.Is(err, os.ErrDeadlineExceeded):
			why = "did not answer in time"
		case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
			why = "reset the connection (the agent stopped or restarted during the call)"
		case err != nil:
			why = "failed: " + err.Error()
		}
		return nil, types.NewError(types.ErrTryAgainLater, fmt.Sprintf("nagare: the node agent at %s %s", socket, why), fmt.Sprint(sc.Err()))
	}
	var resp Response
	if err := json.Unmarshal(sc.Bytes(), &resp); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "nagare: bad answer from the agent: "+err.Error(), "")
	}
	return &resp, nil
}

// PodName is "namespace/name" from CNI_ARGS (K8S_POD_NAMESPACE and
// K8S_POD_NAME, as kubelet's runtime passes them), or "".
func PodName(args string) string {
	var ns, name string
	for _, kv := range strings.Split(args, ";") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "K8S_POD_NAMESPACE":
			ns = v
		case "K8S_POD_NAME":
			name = v
		}
	}
	if name == "" {
		return ""
	}
	return ns + "/" + name
}

// PodUID is K8S_POD_UID from CNI_ARGS (containerd and CRI-O pass it), or "".
func PodUID(args string) string {
	for _, kv := range strings.Split(args, ";") {
		if k, v, _ := strings.Cut(kv, "="); k == "K8S_POD_UID" {
			return v
		}
	}
	return ""
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// NetConf is nagare's network configuration: the spec's fields plus the
// agent socket.
type NetConf struct {
	types.PluginConf
	Socket  string `json:"socket,omitempty"`
	Timeout string `json:"timeout,omitempty"` // the shim's wait for the agent, e.g. "60s"
}

// ParseConf decodes a request's network configuration.
func ParseConf(req *Request) (*NetConf, error) {
	var c NetConf
	if err := json.Unmarshal(req.Config, &c); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "nagare: network configuration: "+err.Error(), "")
	}
	if c.CNIVersion == "" {
		c.CNIVersion = "0.1.0"
	}
	return &c, nil
}
