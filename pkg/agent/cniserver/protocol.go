// Package cniserver is the agent's end of nagare-cni: it serves CNI calls
// forwarded by the shim over a Unix socket (mode 0600) and hands them to a
// Handler (the agent). The shim (cmd/nagare-cni) is thin: it reads the CNI
// environment and stdin, sends one Request, and prints the Response.
package cniserver

import (
	"context"
	"encoding/json"

	"github.com/containernetworking/cni/pkg/types"
)

// DefaultSocket is where the agent listens for the shim.
const DefaultSocket = "/var/run/nagare/cni.sock"

// Request is one CNI call as the runtime made it.
type Request struct {
	Command     string `json:"command"` // ADD, DEL, CHECK, STATUS, GC
	ContainerID string `json:"containerID,omitempty"`
	Netns       string `json:"netns,omitempty"`
	IfName      string `json:"ifName,omitempty"`
	Args        string `json:"args,omitempty"` // CNI_ARGS
	Path        string `json:"path,omitempty"` // CNI_PATH
	// Config is the network configuration from stdin, as given.
	Config json.RawMessage `json:"config"`
}

// Response is the answer: a CNI result (ADD, CHECK of nothing) or a CNI
// error, which the shim prints as the spec's error JSON.
type Response struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *types.Error    `json:"error,omitempty"`
}

// Handler does the work of each call. A returned *types.Error is passed to
// the runtime as it is; any other error becomes code 999 (internal) with
// its text.
type Handler interface {
	// Add attaches the container's interface and returns the CNI result
	// (already converted to the configuration's cniVersion).
	Add(ctx context.Context, req *Request) (types.Result, error)
	Del(ctx context.Context, req *Request) error
	Check(ctx context.Context, req *Request) error
	// GC releases every attachment of this network not in the config's
	// cni.dev/valid-attachments.
	GC(ctx context.Context, req *Request) error
	// Status is nil when the plugin is ready for ADDs.
	Status(ctx context.Context, req *Request) error
}
