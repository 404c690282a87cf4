package k8s

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// TestDeployDryRun: deploy/ as an operator applies it (kubectl apply -k
// deploy/, and the plain nagare.yaml) passes a real kube-apiserver's
// validation and admission (--dry-run=server), and its DaemonSet is what
// deploy/README.md's securityContext review says: one privileged
// container (mount-bpffs, the only Bidirectional mount), every other one
// with capabilities dropped and a short list added, requests and memory
// limits on all, the agent's probes, the image and pull policy from
// kustomization.yaml's values. A Bidirectional mount in a container that
// is not privileged is refused by the server (the reason mount-bpffs is
// privileged).
func TestDeployDryRun(t *testing.T) {
	c := upAPIServer(t)
	deploy := filepath.Join(c.repoRoot, "deploy")
	for _, args := range [][]string{
		{"apply", "--dry-run=server", "-k", deploy},
		{"apply", "--dry-run=server", "-f", filepath.Join(deploy, "nagare.yaml")},
	} {
		out := c.mustKubectl(args...)
		if !strings.Contains(out, "daemonset.apps/nagare created (server dry run)") {
			t.Fatalf("kubectl %s: %s", strings.Join(args, " "), out)
		}
	}

	ds := renderDaemonSet(t, c.mustKubectl("kustomize", deploy))
	spec := ds.Spec.Template.Spec
	all := append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...)
	for _, ct := range all {
		sc := ct.SecurityContext
		if sc == nil {
			t.Fatalf("%s: no securityContext", ct.Name)
		}
		privileged := sc.Privileged != nil && *sc.Privileged
		if privileged != (ct.Name == "mount-bpffs") {
			t.Errorf("%s: privileged %v; only mount-bpffs may be", ct.Name, privileged)
		}
		if !privileged {
			if sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
				t.Errorf("%s: capabilities %+v, want drop ALL", ct.Name, sc.Capabilities)
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("%s: allowPrivilegeEscalation not false", ct.Name)
			}
		}
		for _, m := range ct.VolumeMounts {
			if m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional && !privileged {
				t.Errorf("%s: Bidirectional mount %s", ct.Name, m.Name)
			}
		}
		if ct.Resources.Requests.Cpu().IsZero() || ct.Resources.Requests.Memory().IsZero() || ct.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s: resources %+v, want cpu and memory requests and a memory limit", ct.Name, ct.Resources)
		}
		if ct.Image != "nagare:dev" || ct.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("%s: image %s %s, want kustomization.yaml's nagare:dev IfNotPresent", ct.Name, ct.Image, ct.ImagePullPolicy)
		}
	}
	wantCaps := map[string]string{"install-cni": "", "nagare-switch": "BPF,PERFMON,NET_ADMIN,NET_RAW,IPC_LOCK", "nagare-agent": "NET_ADMIN,SYS_ADMIN"}
	for _, ct := range all {
		want, ok := wantCaps[ct.Name]
		if !ok {
			continue
		}
		var got []string
		for _, cp := range ct.SecurityContext.Capabilities.Add {
			got = append(got, string(cp))
		}
		if strings.Join(got, ",") != want {
			t.Errorf("%s adds %v, want %s (deploy/README.md's review says why each)", ct.Name, got, want)
		}
		if ct.Name == "nagare-agent" && (ct.ReadinessProbe == nil || ct.LivenessProbe == nil) {
			t.Errorf("nagare-agent: readiness %v liveness %v", ct.ReadinessProbe, ct.LivenessProbe)
		}
	}

	// The values: another image and pull policy in a copy of deploy/.
	dir := t.TempDir()
	for _, f := range []string{"nagare.yaml", "kustomization.yaml"} {
		b, err := os.ReadFile(filepath.Join(deploy, f))
		if err != nil {
			t.Fatal(err)
		}
		s := strings.NewReplacer("newName: nagare\n", "newName: registry.example.com/nagare\n", "newTag: dev\n", "newTag: v9\n",
			"image-pull-policy: IfNotPresent", "image-pull-policy: Always").Replace(string(b))
		if err := os.WriteFile(filepath.Join(dir, f), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ds2 := renderDaemonSet(t, c.mustKubectl("kustomize", dir))
	for _, ct := range append(ds2.Spec.Template.Spec.InitContainers, ds2.Spec.Template.Spec.Containers...) {
		if ct.Image != "registry.example.com/nagare:v9" || ct.ImagePullPolicy != corev1.PullAlways {
			t.Errorf("%s with the values changed: %s %s", ct.Name, ct.Image, ct.ImagePullPolicy)
		}
	}

	// The server refuses Bidirectional propagation outside a privileged
	// container: the switch cannot mount bpffs for the host itself.
	bad, err := os.ReadFile(filepath.Join(deploy, "nagare.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(bad), "{name: bpffs, mountPath: /sys/fs/bpf, mountPropagation: HostToContainer}",
		"{name: bpffs, mountPath: /sys/fs/bpf, mountPropagation: Bidirectional}", 1)
	if s == string(bad) {
		t.Fatal("the switch's bpffs mount is not where the test expects it")
	}
	if out, err := runStdin(s, "kubectl", "--kubeconfig", c.kubecfg, "apply", "--dry-run=server", "-f", "-"); err == nil ||
		!strings.Contains(out+err.Error(), "Bidirectional") {
		t.Errorf("a Bidirectional mount in the unprivileged switch: %v %s, want the server to refuse it", err, out)
	}
}

// renderDaemonSet returns the DaemonSet among the YAML documents.
func renderDaemonSet(t *testing.T, docs string) *appsv1.DaemonSet {
	t.Helper()
	d := yaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(docs)), 4096)
	for {
		var raw json.RawMessage
		if err := d.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		var head struct{ Kind string }
		if json.Unmarshal(raw, &head) != nil || head.Kind != "DaemonSet" {
			continue
		}
		var ds appsv1.DaemonSet
		if err := json.Unmarshal(raw, &ds); err != nil {
			t.Fatal(err)
		}
		return &ds
	}
	t.Fatal("no DaemonSet in deploy/")
	return nil
}
