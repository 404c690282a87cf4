// Package scenarios embeds the lab's built-in scenario files (*.yaml in this
// directory) so that `nagarectl lab run NAME` works from any directory.
package scenarios

import "embed"

// FS holds every *.yaml scenario of this directory.
//
//go:embed *.yaml
var FS embed.FS
