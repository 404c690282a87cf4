// Command mkimage writes nagare's container image (nagare-agent,
// nagare-switch, nagare-cni, nagarectl and portmap in /usr/local/bin) as an OCI
// image-layout tar; scripts/k8s/image.sh builds the binaries and runs it.
//
//	go run ./scripts/k8s/mkimage -bin DIR -ref docker.io/library/nagare:dev -o nagare.tar
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nagare-net/nagare/internal/oci"
)

// Binaries is what the image holds (deploy/nagare.yaml runs them; portmap
// is the reference CNI plugin install-cni chains after nagare-cni for hostPort).
var Binaries = []string{"nagare-agent", "nagare-switch", "nagare-cni", "nagarectl", "portmap"}

func main() {
	bin := flag.String("bin", "bin", "directory with the static binaries")
	ref := flag.String("ref", "docker.io/library/nagare:dev", "image name")
	out := flag.String("o", "nagare-image.tar", "output tar")
	flag.Parse()
	files := map[string]oci.File{}
	for _, b := range Binaries {
		files["/usr/local/bin/"+b] = oci.File{Src: filepath.Join(*bin, b)}
	}
	if err := oci.Build(*out, *ref, files, []string{"/usr/local/bin/nagare-agent"}); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
	fmt.Printf("%s: %s\n", *out, *ref)
}
