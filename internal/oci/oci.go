// Package oci writes single-layer OCI image-layout tars that containerd
// imports (`ctr -n k8s.io images import`): nagare's own image and the test
// cluster's pause and busybox, without a registry or a Docker engine.
package oci

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"
)

// File is one file of an image's single layer: from a host file, or a
// symlink.
type File struct {
	Src  string // host file to copy
	Link string // symlink target instead
	Mode int64
}

// Build writes an OCI image-layout tar for ref (e.g.
// "docker.io/library/nagare:dev") with one layer holding files (image
// path → content), ready for `ctr -n k8s.io images import`.
func Build(out, ref string, files map[string]File, entrypoint []string) error {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	dirs := map[string]bool{}
	epoch := time.Unix(0, 0)
	for _, p := range paths {
		// parent directories first
		for i := 1; i < len(p); i++ {
			if p[i] == '/' && !dirs[p[:i]] {
				dirs[p[:i]] = true
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p[1:i] + "/", Mode: 0o755, ModTime: epoch}); err != nil {
					return err
				}
			}
		}
		f := files[p]
		if f.Link != "" {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: p[1:], Linkname: f.Link, ModTime: epoch}); err != nil {
				return err
			}
			continue
		}
		b, err := os.ReadFile(f.Src)
		if err != nil {
			return err
		}
		mode := f.Mode
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
	for _, d := range []string{"tmp", "proc", "sys", "dev", "etc", "var", "run"} {
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
		d := "sha256:" + hex.EncodeToString(s[:])
		blobs[hex.EncodeToString(s[:])] = b
		return d, len(b)
	}
	layerDigest, layerSize := put(layer.Bytes())
	cfg, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": entrypoint, "Env": []string{"PATH=/usr/local/bin:/bin"}},
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
			"annotations": map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": ref}}},
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
			return fmt.Errorf("blob %s: %w", k, err)
		}
	}
	return ow.Close()
}

// AddDynamic adds host binaries to files at their own paths, with the
// shared libraries and the dynamic loader ldd names for each, at theirs:
// a Debian program runs in the image as on the host (the real-Kubernetes
// Bookinfo's wrk; scripts/k8s/e2eimages does the same for its tools).
func AddDynamic(files map[string]File, bins ...string) error {
	for _, src := range bins {
		files[src] = File{Src: src}
		libs, err := SharedLibraries(src)
		if err != nil {
			return err
		}
		for _, l := range libs {
			files[l] = File{Src: l}
		}
	}
	return nil
}

// SharedLibraries lists the paths of the shared libraries and of the
// dynamic loader that ldd names for the host binary bin.
func SharedLibraries(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	var libs []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			libs = append(libs, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0]) // the dynamic loader
		}
	}
	return libs, nil
}
