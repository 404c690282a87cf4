// Command e2eimages writes the container images the two-node test cluster
// and Kubernetes' [sig-network] conformance tests run, as OCI image-layout
// tars under exactly the names the v1.33.13 e2e tests ask for
// (test/utils/image/manifest.go), so containerd finds them locally and
// never pulls (the machine has no registry access, and the test cluster
// must not send anything off the machine anyway).
//
//	go run ./scripts/k8s/e2eimages -k8s /var/cache/nagare/k8s/v1.33.13 -o DIR
//
// What each image is, and how far it is the real one:
//
//	registry.k8s.io/pause:3.10                          a static pause (C, gcc -static): the real one is the same 20 lines
//	registry.k8s.io/e2e-test-images/agnhost:2.53        agnhost built from k8s.io/kubernetes@v1.33.13 (the real binary), and the
//	                                                    tools the real image adds with apk (dig, curl, nc (openbsd), ip, bash)
//	                                                    taken from Debian 12 with their shared libraries, busybox for the rest
//	                                                    (Alpine's base is busybox too; sh is bash, see toolbox), porter's
//	                                                    localhost.crt/key in /; ENTRYPOINT /agnhost, CMD pause as upstream
//	registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7 the same tools (the DNS tests run dig, getent, sh, seq, awk in it)
//	registry.k8s.io/e2e-test-images/busybox:1.36.1-1    Debian's busybox-static (1.35), CMD sh
//	registry.k8s.io/e2e-test-images/nginx:1.14-4        STAND-IN: agnhost netexec serving HTTP on :80 (the EndpointSlice
//	                                                    conformance tests only need a pod that runs and listens on 80)
//	registry.k8s.io/coredns/coredns:v1.14.3             CoreDNS built from github.com/coredns/coredns (scripts/k8s/build.sh)
//
// Images are written once into the cache and skipped when present.
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/nagare-net/nagare/internal/oci"
)

// file is one file of an image's single layer: a host file's content, a
// symlink, or literal content.
type file struct {
	src  string
	link string
	data []byte
	mode int64
}

type image struct {
	ref   string
	files map[string]file
	entry []string
	cmd   []string
}

// tarName is the file an image is written to.
func tarName(ref string) string {
	return strings.NewReplacer("/", "_", ":", "_").Replace(ref) + ".tar"
}

func main() {
	k8s := flag.String("k8s", "/var/cache/nagare/k8s/v1.33.13", "directory with agnhost and coredns (scripts/k8s/build.sh)")
	out := flag.String("o", "", "output directory (default: K8S/images)")
	coreDNSVersion := flag.String("coredns-version", "v1.14.3", "tag of the CoreDNS image")
	porter := flag.String("porter", "", "agnhost's porter/ directory in k8s.io/kubernetes@v1.33.13 (default: in the module cache)")
	flag.Parse()
	if *porter == "" {
		mc, err := exec.Command("go", "env", "GOMODCACHE").Output()
		if err != nil {
			fail(fmt.Errorf("go env GOMODCACHE: %w", err))
		}
		*porter = filepath.Join(strings.TrimSpace(string(mc)), "k8s.io/kubernetes@v1.33.13/test/images/agnhost/porter")
	}
	if *out == "" {
		*out = filepath.Join(*k8s, "images")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fail(err)
	}
	work, err := os.MkdirTemp("", "e2eimages-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(work)

	pause := filepath.Join(work, "pause")
	src := pause + ".c"
	if err := os.WriteFile(src, []byte(`#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
static void quit(int s) { (void)s; exit(0); }
int main(void) { signal(SIGTERM, quit); signal(SIGINT, quit); for (;;) pause(); }
`), 0o644); err != nil {
		fail(err)
	}
	if b, err := exec.Command("gcc", "-static", "-O2", "-o", pause, src).CombinedOutput(); err != nil {
		fail(fmt.Errorf("gcc pause: %v %s", err, b))
	}

	agnhost := filepath.Join(*k8s, "agnhost")
	images := []image{
		{ref: "registry.k8s.io/pause:3.10", files: map[string]file{"/pause": {src: pause}}, entry: []string{"/pause"}},
		{ref: "registry.k8s.io/e2e-test-images/busybox:1.36.1-1", files: busybox(nil), cmd: []string{"sh"}},
		{ref: "registry.k8s.io/e2e-test-images/agnhost:2.53", files: withPorterCert(withAgnhost(toolbox(), agnhost), *porter),
			entry: []string{"/agnhost"}, cmd: []string{"pause"}},
		{ref: "registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7", files: toolbox(), cmd: []string{"bash"}},
		{ref: "registry.k8s.io/e2e-test-images/nginx:1.14-4", files: withAgnhost(busybox(nil), agnhost),
			entry: []string{"/agnhost", "netexec", "--http-port=80", "--udp-port=-1"}},
	}
	if _, err := os.Stat(filepath.Join(*k8s, "coredns")); err == nil {
		images = append(images, image{ref: "registry.k8s.io/coredns/coredns:" + *coreDNSVersion,
			files: map[string]file{"/coredns": {src: filepath.Join(*k8s, "coredns")}}, entry: []string{"/coredns"}})
	} else {
		fmt.Fprintln(os.Stderr, "e2eimages: no coredns binary; no CoreDNS image")
	}
	for _, img := range images {
		path := filepath.Join(*out, tarName(img.ref))
		if _, err := os.Stat(path); err == nil {
			fmt.Printf("%s: present\n", path)
			continue
		}
		if err := build(path+".tmp", img); err != nil {
			fail(fmt.Errorf("%s: %w", img.ref, err))
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			fail(err)
		}
		fmt.Printf("%s: %s\n", path, img.ref)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "e2eimages:", err)
	os.Exit(1)
}

// busybox is Debian's busybox-static with every applet linked in /bin,
// except the names in skip (real tools take them), and the small /etc the
// images share. /usr/bin and /sbin point at /bin, as PATH in the tests'
// commands may name either.
func busybox(skip map[string]bool) map[string]file {
	fs := map[string]file{
		"/bin/busybox":       {src: "/bin/busybox"},
		"/usr/bin":           {link: "/bin"},
		"/usr/sbin":          {link: "/bin"},
		"/sbin":              {link: "bin"},
		"/usr/local/bin":     {link: "/bin"},
		"/etc/passwd":        {data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\nuser-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n"), mode: 0o644},
		"/etc/group":         {data: []byte("root:x:0:\nnogroup:x:65534:\nuser-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n"), mode: 0o644},
		"/etc/nsswitch.conf": {data: []byte("hosts: files dns\npasswd: files\ngroup: files\n"), mode: 0o644},
	}
	out, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		fail(fmt.Errorf("busybox --list: %w", err))
	}
	for _, a := range strings.Fields(string(out)) {
		if !skip[a] && a != "busybox" {
			fs["/bin/"+a] = file{link: "busybox"}
		}
	}
	return fs
}

// toolbox is busybox plus the tools upstream's agnhost image installs with
// apk (bind-tools, curl, netcat-openbsd, iproute2, bash) and getent, from
// Debian 12, each with the shared libraries ldd names, at their paths.
func toolbox() map[string]file {
	tools := map[string]string{"dig": "/usr/bin/dig", "nslookup": "/usr/bin/nslookup", "curl": "/usr/bin/curl",
		"nc": "/usr/bin/nc.openbsd", "ip": "/usr/sbin/ip", "bash": "/usr/bin/bash", "getent": "/usr/bin/getent"}
	// sh is bash: Debian's busybox-static runs its own applets before
	// anything on PATH (FEATURE_PREFER_APPLETS), so a busybox sh would run
	// busybox's nc (no -u) where a test's "sh -c '... | nc -u'" means
	// netcat-openbsd, as it does on upstream's Alpine image.
	skip := map[string]bool{"sh": true}
	for n := range tools {
		skip[n] = true
	}
	fs := busybox(skip)
	fs["/bin/sh"] = file{link: "bash"}
	for name, src := range tools {
		fs["/bin/"+name] = file{src: src}
		libs, err := oci.SharedLibraries(src)
		if err != nil {
			fail(fmt.Errorf("%w (install bind9-dnsutils curl netcat-openbsd iproute2)", err))
		}
		for _, l := range libs {
			fs[l] = file{src: l}
		}
	}
	return fs
}

func withAgnhost(fs map[string]file, agnhost string) map[string]file {
	fs["/agnhost"] = file{src: agnhost}
	fs["/agnhost-2"] = file{link: "agnhost"}
	fs["/uploads/.keep"] = file{data: []byte{}, mode: 0o644}
	return fs
}

// withPorterCert adds the TLS certificate and key upstream's Dockerfile
// puts in / (agnhost porter serves its https ports with them; the Proxy
// conformance tests fetch those ports through the API server).
func withPorterCert(fs map[string]file, dir string) map[string]file {
	for _, f := range []string{"localhost.crt", "localhost.key"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			fail(fmt.Errorf("agnhost porter's %s: %w", f, err))
		}
		fs["/"+f] = file{src: filepath.Join(dir, f), mode: 0o644}
	}
	return fs
}

// build writes an OCI image-layout tar with one layer (as internal/oci,
// plus CMD, which upstream's agnhost relies on: pods that give only args
// run /agnhost ARGS, pods that give nothing run /agnhost pause).
func build(out string, img image) error {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	paths := make([]string, 0, len(img.files))
	for p := range img.files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	dirs := map[string]bool{}
	epoch := time.Unix(0, 0)
	for _, p := range paths {
		for i := 1; i < len(p); i++ {
			if p[i] == '/' && !dirs[p[:i]] {
				dirs[p[:i]] = true
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p[1:i] + "/", Mode: 0o755, ModTime: epoch}); err != nil {
					return err
				}
			}
		}
		f := img.files[p]
		if f.link != "" {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: p[1:], Linkname: f.link, ModTime: epoch}); err != nil {
				return err
			}
			continue
		}
		b := f.data
		if f.src != "" {
			var err error
			if b, err = os.ReadFile(f.src); err != nil {
				return err
			}
		}
		mode := f.mode
		if mode == 0 {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p[1:], Mode: mode, Size: int64(len(b)), ModTime: epoch}); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	for _, d := range []string{"tmp", "proc", "sys", "dev", "etc", "var", "run", "root", "home"} {
		if !dirs["/"+d] {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o1777, ModTime: epoch}); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	blobs := map[string][]byte{}
	put := func(b []byte) (string, int) {
		s := sha256.Sum256(b)
		blobs[hex.EncodeToString(s[:])] = b
		return "sha256:" + hex.EncodeToString(s[:]), len(b)
	}
	layerDigest, layerSize := put(layer.Bytes())
	config := map[string]any{"Env": []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}
	if img.entry != nil {
		config["Entrypoint"] = img.entry
	}
	if img.cmd != nil {
		config["Cmd"] = img.cmd
	}
	cfg, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux", "config": config,
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	cfgDigest, cfgSize := put(cfg)
	man, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfgDigest, "size": cfgSize},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layerDigest, "size": layerSize}},
	})
	manDigest, manSize := put(man)
	index, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"manifests": []any{map[string]any{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manDigest, "size": manSize,
			"annotations": map[string]string{"io.containerd.image.name": img.ref, "org.opencontainers.image.ref.name": img.ref}}},
	})
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	ow := tar.NewWriter(f)
	add := func(name string, b []byte) error {
		if err := ow.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: epoch}); err != nil {
			return err
		}
		_, err := ow.Write(b)
		return err
	}
	if err := add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := add("index.json", index); err != nil {
		return err
	}
	keys := make([]string, 0, len(blobs))
	for k := range blobs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := add("blobs/sha256/"+k, blobs[k]); err != nil {
			return err
		}
	}
	return ow.Close()
}
