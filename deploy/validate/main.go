// Offline checks of the deploy/ files that need neither a cluster nor a Docker engine
// (docs/deploy.md, "What was checked here"). Run from this directory: go run .
//
//  1. Every manifest in deploy/k8s decodes strictly into the Kubernetes API types (unknown or
//     mistyped fields fail), and the objects agree: the Deployment's selector selects its pods,
//     its probes hit GET /health on the named port, COLIBRI_PORT is that port, COLIBRI_THREADS
//     is the CPU limit, the volumes are mounted and the claim is defined, the grace period
//     covers preStop + colibri's 30 s drain; the Service selects the pods and targets the
//     port; the HPA scales the Deployment.
//  2. Every COPY source of deploy/docker/Dockerfile is in the build context that the root
//     .dockerignore leaves (with Docker's own pattern matcher), and target/ and .git are not.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// drainCap is colibri serve's longest drain after SIGTERM (cli/src/serve/mod.rs, DRAIN_CAP).
const drainCap = 30

var failures int

func fail(f string, a ...any) {
	fmt.Printf("FAIL "+f+"\n", a...)
	failures++
}

func ok(f string, a ...any) { fmt.Printf("ok   "+f+"\n", a...) }

func main() {
	root := "../.."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	checkManifests(filepath.Join(root, "deploy", "k8s"))
	checkDockerContext(root)
	if failures > 0 {
		fmt.Printf("%d check(s) failed\n", failures)
		os.Exit(1)
	}
	fmt.Println("all checks passed")
}

func checkManifests(dir string) {
	var dep *appsv1.Deployment
	var svc *corev1.Service
	var hpa *autoscalingv2.HorizontalPodAutoscaler
	var pvcs []*corev1.PersistentVolumeClaim
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if len(files) == 0 {
		fail("no manifests in %s", dir)
		return
	}
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			fail("%v", err)
			continue
		}
		name := filepath.Base(path)
		for _, doc := range bytes.Split(data, []byte("\n---")) {
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			var meta struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				fail("%s: %v", name, err)
				continue
			}
			var obj any
			switch meta.APIVersion + " " + meta.Kind {
			case "apps/v1 Deployment":
				dep = &appsv1.Deployment{}
				obj = dep
			case "v1 Service":
				svc = &corev1.Service{}
				obj = svc
			case "autoscaling/v2 HorizontalPodAutoscaler":
				hpa = &autoscalingv2.HorizontalPodAutoscaler{}
				obj = hpa
			case "v1 PersistentVolumeClaim":
				p := &corev1.PersistentVolumeClaim{}
				pvcs = append(pvcs, p)
				obj = p
			default:
				fail("%s: unexpected %q %q", name, meta.APIVersion, meta.Kind)
				continue
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				fail("%s: %v", name, err)
				continue
			}
			ok("%s: %s %s decodes strictly", name, meta.APIVersion, meta.Kind)
		}
	}
	if dep == nil || svc == nil {
		fail("a Deployment and a Service are expected")
		return
	}
	pod := dep.Spec.Template
	if dep.Spec.Selector == nil || !labels.SelectorFromSet(dep.Spec.Selector.MatchLabels).Matches(labels.Set(pod.Labels)) {
		fail("deployment: the selector does not select the template's labels")
	}
	if len(pod.Spec.Containers) != 1 {
		fail("deployment: one container expected")
		return
	}
	c := pod.Spec.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if fmt.Sprint(ports["http"]) != env["COLIBRI_PORT"] {
		fail("deployment: containerPort http (%d) != COLIBRI_PORT (%s)", ports["http"], env["COLIBRI_PORT"])
	}
	if env["COLIBRI_HOST"] != "0.0.0.0" {
		fail("deployment: COLIBRI_HOST must be 0.0.0.0 for probes and the Service to reach the pod")
	}
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" || ports[p.HTTPGet.Port.StrVal] == 0 {
			fail("deployment: the %s probe is not GET /health on a named container port", name)
		}
	}
	if c.Resources.Limits.Cpu().String() != env["COLIBRI_THREADS"] {
		fail("deployment: COLIBRI_THREADS (%s) != the CPU limit (%s)", env["COLIBRI_THREADS"], c.Resources.Limits.Cpu())
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	for _, v := range pod.Spec.Volumes {
		if _, found := mounts[v.Name]; !found {
			fail("deployment: volume %s is not mounted", v.Name)
		}
		if v.PersistentVolumeClaim != nil {
			defined := false
			for _, p := range pvcs {
				defined = defined || p.Name == v.PersistentVolumeClaim.ClaimName
			}
			if !defined {
				fail("deployment: claim %s is not defined in %s", v.PersistentVolumeClaim.ClaimName, dir)
			}
		}
	}
	if m := mounts["models"]; !m.ReadOnly || !strings.HasPrefix(env["COLIBRI_MODEL"], m.MountPath+"/") {
		fail("deployment: COLIBRI_MODEL (%s) is not under the read-only models mount", env["COLIBRI_MODEL"])
	}
	if m := mounts["api-key"]; !strings.HasPrefix(env["COLIBRI_API_KEY_FILE"], m.MountPath+"/") {
		fail("deployment: COLIBRI_API_KEY_FILE is not under the secret mount")
	}
	preStop := int64(0)
	if h := c.Lifecycle; h != nil && h.PreStop != nil && h.PreStop.Exec != nil {
		cmd := h.PreStop.Exec.Command
		if len(cmd) == 2 && cmd[0] == "sleep" {
			fmt.Sscan(cmd[1], &preStop)
		}
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || *g <= preStop+drainCap {
		fail("deployment: terminationGracePeriodSeconds must exceed preStop (%d s) + drain (%d s)", preStop, drainCap)
	}
	ok("deployment: selector, port, probes, threads, volumes, grace period agree")
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
		fail("service: the selector does not select the pods")
	}
	for _, p := range svc.Spec.Ports {
		if ports[p.TargetPort.StrVal] == 0 && p.TargetPort.IntVal != ports["http"] {
			fail("service: targetPort %s is not the container port", p.TargetPort.String())
		}
	}
	ok("service: selects the pods and targets the container port")
	if hpa != nil {
		r := hpa.Spec.ScaleTargetRef
		if r.APIVersion != "apps/v1" || r.Kind != "Deployment" || r.Name != dep.Name {
			fail("hpa: scaleTargetRef %+v is not the deployment", r)
		}
		ok("hpa: scales the deployment")
	}
}

func checkDockerContext(root string) {
	f, err := os.Open(filepath.Join(root, ".dockerignore"))
	if err != nil {
		fail("%v", err)
		return
	}
	pats, err := ignorefile.ReadAll(f)
	f.Close()
	if err != nil {
		fail(".dockerignore: %v", err)
		return
	}
	pm, err := patternmatcher.New(pats)
	if err != nil {
		fail(".dockerignore: %v", err)
		return
	}
	in := map[string]bool{}
	var files, size int64
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if skip, _ := pm.MatchesOrParentMatches(rel); skip {
			if d.IsDir() && !pm.Exclusions() {
				return filepath.SkipDir
			}
			return nil
		}
		in[rel] = true
		if !d.IsDir() {
			if info, err := d.Info(); err == nil {
				files++
				size += info.Size()
			}
		}
		return nil
	})
	ok("docker build context: %d files, %.1f MB", files, float64(size)/1e6)
	for _, never := range []string{"target", ".git"} {
		if in[never] {
			fail("docker build context includes %s", never)
		}
	}
	df, err := os.Open(filepath.Join(root, "deploy", "docker", "Dockerfile"))
	if err != nil {
		fail("%v", err)
		return
	}
	defer df.Close()
	sc := bufio.NewScanner(df)
	for sc.Scan() {
		words := strings.Fields(sc.Text())
		if len(words) < 3 || words[0] != "COPY" || strings.HasPrefix(words[1], "--from") {
			continue
		}
		for _, src := range words[1 : len(words)-1] {
			if strings.HasPrefix(src, "--") {
				continue
			}
			src = strings.TrimSuffix(src, "/")
			if in[src] {
				ok("Dockerfile COPY %s: in the context", src)
			} else {
				fail("Dockerfile COPY %s: missing from the build context", src)
			}
		}
	}
}
