package kubernetes

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// deployments is the repository's manifest directory.
var deployments = filepath.Join("..", "..", "..", "..", "..", "deployments", "kubernetes")

// docs reads every YAML document of the files matching pattern.
func docs(t *testing.T, pattern string) []*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(deployments, pattern))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests %s (%v)", pattern, err)
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, part := range bytes.Split(raw, []byte("\n---\n")) {
			j, err := yaml.YAMLToJSON(part)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(j); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out = append(out, u)
		}
	}
	return out
}

func byKind(all []*unstructured.Unstructured, kind string) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for _, u := range all {
		if u.GetKind() == kind {
			out[u.GetName()] = u
		}
	}
	return out
}

// The Kueue manifests are the documented queues (premium 8 GPUs, standard
// 2, one cohort; deployments/README.md), and the jobs the deployed
// backend renders are admissible there: every resource they request is
// covered, and a premium (4 GPU) and a standard (2 GPU) job each fit their
// queue's quota.
func TestKueueManifestsAdmitTheRenderedJobs(t *testing.T) {
	kueue := docs(t, filepath.Join("kueue", "*.yaml"))
	cqs := byKind(kueue, "ClusterQueue")
	lqs := byKind(kueue, "LocalQueue")
	classes := byKind(kueue, "WorkloadPriorityClass")
	if len(byKind(kueue, "ResourceFlavor")) != 1 {
		t.Fatal("want one ResourceFlavor")
	}

	// The backend's settings as deployed.
	deploy := byKind(docs(t, "50-executor-kubernetes.yaml"), "Deployment")["executor-kubernetes"]
	cs, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
	flags := map[string]string{}
	for _, a := range cs[0].(map[string]any)["args"].([]any) {
		if k, v, ok := strings.Cut(a.(string), "="); ok {
			flags[k] = v
		}
	}
	cfg := RenderConfig{Namespace: flags["--k8s-namespace"], S3Endpoint: flags["--s3-endpoint"], S3Bucket: flags["--s3-bucket"],
		DefaultQueue: flags["--k8s-default-queue"], PriorityClasses: map[string]string{}}
	for _, kv := range strings.Split(flags["--k8s-priority-classes"], ",") {
		k, v, _ := strings.Cut(kv, "=")
		cfg.PriorityClasses[k] = v
	}

	for _, tc := range []struct {
		queue, clusterQueue string
		gpus                string
		quota               int64
	}{
		// The queues the video API gives a generation, by its tenant's
		// tier (docs/api/video.md), and their aliases.
		{queue: "tenant-high-priority-queue", clusterQueue: "tenant-high-priority-queue", gpus: "4", quota: 8},
		{queue: "tenant-low-priority-queue", clusterQueue: "tenant-low-priority-queue", gpus: "2", quota: 2},
		{queue: "premium", clusterQueue: "tenant-high-priority-queue", gpus: "4", quota: 8},
		{queue: "standard", clusterQueue: "tenant-low-priority-queue", gpus: "2", quota: 2},
	} {
		lq := lqs[tc.queue]
		if lq == nil || lq.GetNamespace() != cfg.Namespace {
			t.Fatalf("LocalQueue %s in %s missing", tc.queue, cfg.Namespace)
		}
		if cq, _, _ := unstructured.NestedString(lq.Object, "spec", "clusterQueue"); cq != tc.clusterQueue {
			t.Errorf("LocalQueue %s points at %s, want %s", tc.queue, cq, tc.clusterQueue)
		}
		if classes[cfg.PriorityClasses[tc.queue]] == nil {
			t.Errorf("queue %s names WorkloadPriorityClass %q, which is not defined", tc.queue, cfg.PriorityClasses[tc.queue])
		}
		cq := cqs[tc.clusterQueue]
		if cohort, _, _ := unstructured.NestedString(cq.Object, "spec", "cohort"); cohort != "video" {
			t.Errorf("%s cohort %q, want video", tc.clusterQueue, cohort)
		}
		groups, _, _ := unstructured.NestedSlice(cq.Object, "spec", "resourceGroups")
		g := groups[0].(map[string]any)
		quota := map[string]resource.Quantity{}
		for _, r := range g["flavors"].([]any)[0].(map[string]any)["resources"].([]any) {
			r := r.(map[string]any)
			quota[r["name"].(string)] = resource.MustParse(toString(r["nominalQuota"]))
		}
		if q := quota[gpuResource]; q.Value() != tc.quota {
			t.Errorf("%s has %s GPUs, want %d", tc.clusterQueue, q.String(), tc.quota)
		}

		job, err := Render(videoTask("t-"+tc.queue, imageToVideo, tc.queue, tc.gpus), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if l := job.GetLabels(); l[QueueLabel] != tc.queue || l[PriorityClassLabel] == "" ||
			l[PriorityClassLabel] != cfg.PriorityClasses[tc.queue] {
			t.Errorf("the %s job's labels %v: want its queue and the priority class %q", tc.queue, l, cfg.PriorityClasses[tc.queue])
		}
		need := jobRequests(t, job)
		for name, q := range need {
			limit, ok := quota[name]
			if !ok || !slices.Contains(toStrings(g["coveredResources"]), name) {
				t.Errorf("%s does not cover %s, which the %s job requests", tc.clusterQueue, name, tc.queue)
				continue
			}
			if q.Cmp(limit) > 0 {
				t.Errorf("the %s job requests %s %s, more than %s's %s", tc.queue, q.String(), name, tc.clusterQueue, limit.String())
			}
		}
	}
}

// jobRequests adds up what the job's pods request (a container's limits
// stand for its requests where it gives none, as in Kubernetes).
func jobRequests(t *testing.T, job *unstructured.Unstructured) map[string]resource.Quantity {
	t.Helper()
	total := map[string]resource.Quantity{}
	specs, _, _ := unstructured.NestedMap(job.Object, "spec", pytorchReplicas)
	for _, rs := range specs {
		n, _, _ := unstructured.NestedInt64(rs.(map[string]any), "replicas")
		cs, _, _ := unstructured.NestedSlice(rs.(map[string]any), "template", "spec", "containers")
		for _, c := range cs {
			res := c.(map[string]any)["resources"].(map[string]any)
			req := map[string]string{}
			for k, v := range res["limits"].(map[string]any) {
				req[k] = toString(v)
			}
			if r, ok := res["requests"].(map[string]any); ok {
				for k, v := range r {
					req[k] = toString(v)
				}
			}
			for k, v := range req {
				q := resource.MustParse(v)
				for range n {
					sum := total[k]
					sum.Add(q)
					total[k] = sum
				}
			}
		}
	}
	return total
}

func toString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return resource.NewQuantity(x, resource.DecimalSI).String()
	}
	b, _ := yaml.Marshal(v)
	return strings.TrimSpace(string(b))
}

func toStrings(v any) []string {
	var out []string
	for _, e := range v.([]any) {
		out = append(out, e.(string))
	}
	return out
}
