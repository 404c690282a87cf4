//go:build tools

// Package tools pins modules that parts of nagare are about to use, so that
// concurrent work does not race on go.mod.
package tools

import (
	_ "github.com/cilium/ebpf"
	_ "github.com/schollz/progressbar/v3"
	_ "github.com/stretchr/testify/require"
	_ "github.com/vishvananda/netlink"
	_ "github.com/vishvananda/netns"
	_ "golang.org/x/sys/unix"
	_ "gonum.org/v1/plot"
	_ "gopkg.in/yaml.v3"
)
