// Command nagare-cni is nagare's CNI plugin: a shim the container runtime
// runs for every pod network call. It forwards the call to the node's
// nagare-agent over a Unix socket and prints the agent's answer; all the
// work is the agent's. The CNI library's skel reads the environment,
// checks versions and variables and prints errors in the spec's format.
//
// Network configuration keys beyond the spec's: "socket" (the agent's,
// default /var/run/nagare/cni.sock) and "timeout" (how long to wait for
// the agent, a Go duration; default per command, see cniserver.CallTimeouts).
package main

import (
	"context"
	"encoding/json"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/nagare-net/nagare/pkg/agent/cniserver"
)

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    func(a *skel.CmdArgs) error { return forward("ADD", a) },
		Del:    func(a *skel.CmdArgs) error { return forward("DEL", a) },
		Check:  func(a *skel.CmdArgs) error { return forward("CHECK", a) },
		GC:     func(a *skel.CmdArgs) error { return forward("GC", a) },
		Status: func(a *skel.CmdArgs) error { return forward("STATUS", a) },
	}, version.All, "nagare-cni: pods get their network from the nagare node agent")
}

func forward(cmd string, a *skel.CmdArgs) error {
	conf, err := cniserver.ParseConf(&cniserver.Request{Config: a.StdinData})
	if err != nil {
		return err
	}
	socket := conf.Socket
	if socket == "" {
		socket = cniserver.DefaultSocket
	}
	// The agent bounds its own work; the shim waits a little longer, so
	// a hung agent still ends in "try again later", not a hung runtime.
	wait := cniserver.CallTimeouts[cmd] + 5*time.Second
	if conf.Timeout != "" {
		if wait, err = time.ParseDuration(conf.Timeout); err != nil {
			return types.NewError(types.ErrInvalidNetworkConfig, "nagare: timeout: "+err.Error(), "")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := cniserver.Call(ctx, socket, &cniserver.Request{Command: cmd, ContainerID: a.ContainerID,
		Netns: a.Netns, IfName: a.IfName, Args: a.Args, Path: a.Path, Config: json.RawMessage(a.StdinData)})
	if err != nil {
		return err
	}
	if resp.Error != nil {
		return resp.Error
	}
	if cmd != "ADD" {
		return nil
	}
	r, err := version.NewResult(conf.CNIVersion, resp.Result)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, "nagare: the agent's result: "+err.Error(), "")
	}
	return types.PrintResult(r, conf.CNIVersion)
}
