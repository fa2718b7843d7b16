package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kueuev1beta1 "sigs.k8s.io/kueue/apis/kueue/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/taskmesh/taskmesh/platform/archtest"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/ociimage"
)

// kinds are the Go types every manifest kind decodes into: the
// Kubernetes API's, the Prometheus Operator's and Kueue's own, and the
// operator structs of manifests_operators_test.go.
var kinds = map[string]func() any{
	"v1/Namespace":                             func() any { return &corev1.Namespace{} },
	"v1/Secret":                                func() any { return &corev1.Secret{} },
	"v1/Service":                               func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                        func() any { return &corev1.ServiceAccount{} },
	"apps/v1/Deployment":                       func() any { return &appsv1.Deployment{} },
	"apps/v1/DaemonSet":                        func() any { return &appsv1.DaemonSet{} },
	"policy/v1/PodDisruptionBudget":            func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1/NetworkPolicy":       func() any { return &networkingv1.NetworkPolicy{} },
	"rbac.authorization.k8s.io/v1/Role":        func() any { return &rbacv1.Role{} },
	"rbac.authorization.k8s.io/v1/RoleBinding": func() any { return &rbacv1.RoleBinding{} },
	"apiextensions.k8s.io/v1/CustomResourceDefinition": func() any {
		return &apiextensionsv1.CustomResourceDefinition{}
	},
	"monitoring.coreos.com/v1/ServiceMonitor":      func() any { return &monitoringv1.ServiceMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule":      func() any { return &monitoringv1.PrometheusRule{} },
	"kueue.x-k8s.io/v1beta1/ClusterQueue":          func() any { return &kueuev1beta1.ClusterQueue{} },
	"kueue.x-k8s.io/v1beta1/LocalQueue":            func() any { return &kueuev1beta1.LocalQueue{} },
	"kueue.x-k8s.io/v1beta1/ResourceFlavor":        func() any { return &kueuev1beta1.ResourceFlavor{} },
	"kueue.x-k8s.io/v1beta1/WorkloadPriorityClass": func() any { return &kueuev1beta1.WorkloadPriorityClass{} },
	"postgresql.cnpg.io/v1/Cluster":                func() any { return &cnpgCluster{} },
	"kafka.strimzi.io/v1beta2/Kafka":               func() any { return &strimziKafka{} },
	"kafka.strimzi.io/v1beta2/KafkaNodePool":       func() any { return &strimziNodePool{} },
	"kafka.strimzi.io/v1beta2/KafkaTopic":          func() any { return &strimziTopic{} },
	"kafka.strimzi.io/v1beta2/KafkaUser":           func() any { return &strimziUser{} },
}

// manifest is one decoded document.
type manifest struct {
	where string // file:index
	kind  string // apiVersion/kind
	obj   any
}

// loadManifests decodes every document under deployments/kubernetes
// strictly: YAML with duplicate keys, an unknown kind and an unknown field
// all fail.
func loadManifests(t *testing.T) []manifest {
	t.Helper()
	root, err := archtest.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	var out []manifest
	err = filepath.WalkDir(filepath.Join(root, "deployments", "kubernetes"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, doc := range splitDocuments(string(b)) {
			where := fmt.Sprintf("%s#%d", strings.TrimPrefix(path, root+"/"), i)
			js, err := yaml.YAMLToJSONStrict([]byte(doc))
			if err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			var tm metav1.TypeMeta
			if err := json.Unmarshal(js, &tm); err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			kind := tm.APIVersion + "/" + tm.Kind
			newObj, ok := kinds[kind]
			if !ok {
				return fmt.Errorf("%s: no Go type for %s", where, kind)
			}
			obj := newObj()
			dec := json.NewDecoder(bytes.NewReader(js))
			dec.DisallowUnknownFields()
			if err := dec.Decode(obj); err != nil {
				return fmt.Errorf("%s (%s): %w", where, kind, err)
			}
			out = append(out, manifest{where: where, kind: kind, obj: obj})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// splitDocuments splits a YAML stream at its "---" lines, dropping
// documents that are only comments.
func splitDocuments(s string) []string {
	var docs []string
	for _, doc := range strings.Split("\n"+s, "\n---") {
		for _, line := range strings.Split(doc, "\n") {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
				docs = append(docs, doc)
				break
			}
		}
	}
	return docs
}

func of[T any](ms []manifest) []*T {
	var out []*T
	for _, m := range ms {
		if o, ok := m.obj.(*T); ok {
			out = append(out, o)
		}
	}
	return out
}

// workload is a Deployment or DaemonSet's pod template.
type workload struct {
	kind, name string
	template   corev1.PodTemplateSpec
}

func workloads(ms []manifest) []workload {
	var out []workload
	for _, d := range of[appsv1.Deployment](ms) {
		out = append(out, workload{"Deployment", d.Name, d.Spec.Template})
	}
	for _, d := range of[appsv1.DaemonSet](ms) {
		out = append(out, workload{"DaemonSet", d.Name, d.Spec.Template})
	}
	return out
}

// Every manifest decodes strictly into its API type; every Taskmesh
// container runs the image `make image` builds with flags the binary
// accepts, has probes, resource requests and a metrics port; every
// Deployment has a PodDisruptionBudget; only the gateway is open to the
// outside; the secrets the services read are the ones the operators
// write; the PrometheusRule is the alert rule file.
func TestKubernetesManifests(t *testing.T) {
	ms := loadManifests(t)
	if len(ms) < 30 {
		t.Fatalf("only %d manifests", len(ms))
	}
	for _, w := range workloads(ms) {
		checkWorkload(t, w)
	}
	checkDisruptionBudgets(t, ms)
	checkNetworkPolicies(t, ms)
	checkOperatorSecrets(t, ms)
	checkMonitoring(t, ms)
}

func checkWorkload(t *testing.T, w workload) {
	t.Helper()
	if w.template.Labels["app.kubernetes.io/part-of"] != "taskmesh" {
		t.Errorf("%s %s: pods lack app.kubernetes.io/part-of=taskmesh (the network policies select by it)", w.kind, w.name)
	}
	for _, c := range w.template.Spec.Containers {
		where := w.kind + " " + w.name + "/" + c.Name
		if c.Image != ociimage.Repository+":latest" {
			t.Errorf("%s: image %q, want the one make image tags, %s:latest", where, c.Image, ociimage.Repository)
			continue
		}
		cmd, rest, err := rootCommand().Find(c.Args)
		if err != nil || cmd.Name() == "taskmesh" {
			t.Errorf("%s: args %v name no taskmesh command: %v", where, c.Args, err)
			continue
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Errorf("%s: taskmesh %s refuses its args: %v", where, cmd.Name(), err)
		}
		if !slices.Contains(c.Args, "--metrics-addr=:9464") || !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
			return p.Name == "metrics" && p.ContainerPort == 9464
		}) {
			t.Errorf("%s: no metrics port 9464 served with --metrics-addr", where)
		}
		if c.ReadinessProbe == nil || c.LivenessProbe == nil {
			t.Errorf("%s: readiness and liveness probes needed", where)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
			t.Errorf("%s: CPU and memory requests needed", where)
		}
	}
}

func checkDisruptionBudgets(t *testing.T, ms []manifest) {
	t.Helper()
	pdbs := of[policyv1.PodDisruptionBudget](ms)
	for _, d := range of[appsv1.Deployment](ms) {
		covered := slices.ContainsFunc(pdbs, func(p *policyv1.PodDisruptionBudget) bool {
			sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
			return err == nil && sel.Matches(labels.Set(d.Spec.Template.Labels))
		})
		if !covered {
			t.Errorf("Deployment %s has no PodDisruptionBudget", d.Name)
		}
	}
}

// checkNetworkPolicies: a default deny covers every Taskmesh pod, and
// the only ingress open to any source is the gateway's; only the gateway's
// Service is exposed outside the cluster.
func checkNetworkPolicies(t *testing.T, ms []manifest) {
	t.Helper()
	pods := labels.Set{"app.kubernetes.io/part-of": "taskmesh", "app": "scheduler"}
	var deny bool
	for _, np := range of[networkingv1.NetworkPolicy](ms) {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			t.Fatalf("NetworkPolicy %s: %v", np.Name, err)
		}
		if len(np.Spec.Ingress) == 0 && sel.Matches(pods) {
			deny = true
		}
		for _, rule := range np.Spec.Ingress {
			if len(rule.From) == 0 && !reflect.DeepEqual(np.Spec.PodSelector.MatchLabels, map[string]string{"app": "gateway"}) {
				t.Errorf("NetworkPolicy %s admits any source to %v", np.Name, np.Spec.PodSelector.MatchLabels)
			}
		}
	}
	if !deny {
		t.Error("no default-deny NetworkPolicy covers the Taskmesh pods")
	}
	for _, s := range of[corev1.Service](ms) {
		if (s.Spec.Type == corev1.ServiceTypeLoadBalancer || s.Spec.Type == corev1.ServiceTypeNodePort) && s.Spec.Selector["app"] != "gateway" {
			t.Errorf("Service %s exposes %v outside the cluster", s.Name, s.Spec.Selector)
		}
	}
}

// checkOperatorSecrets: the database URL comes from the secret
// CloudNativePG writes for the Cluster (<name>-app, key uri), the Kafka
// password from the one Strimzi writes for the KafkaUser (<name>, key
// password), and every topic belongs to the Kafka cluster.
func checkOperatorSecrets(t *testing.T, ms []manifest) {
	t.Helper()
	clusters := of[cnpgCluster](ms)
	users := of[strimziUser](ms)
	kafkas := of[strimziKafka](ms)
	if len(clusters) != 1 || len(users) != 1 || len(kafkas) != 1 {
		t.Fatalf("want one CloudNativePG Cluster, KafkaUser and Kafka; have %d, %d, %d", len(clusters), len(users), len(kafkas))
	}
	for _, w := range workloads(ms) {
		for _, c := range w.template.Spec.Containers {
			for _, e := range c.Env {
				if e.Name == "TASKMESH_DATABASE_URL" {
					ref := e.ValueFrom.SecretKeyRef
					if ref == nil || ref.Name != clusters[0].Metadata.Name+"-app" || ref.Key != "uri" {
						t.Errorf("%s: TASKMESH_DATABASE_URL from %+v, want the Cluster's secret %s-app/uri", w.name, ref, clusters[0].Metadata.Name)
					}
				}
			}
		}
		for _, v := range w.template.Spec.Volumes {
			if v.Name == "kafka" && (v.Secret == nil || v.Secret.SecretName != users[0].Metadata.Name) {
				t.Errorf("%s: the kafka volume is not the KafkaUser's secret %s", w.name, users[0].Metadata.Name)
			}
		}
	}
	topics := map[string]bool{}
	for _, tp := range of[strimziTopic](ms) {
		topics[tp.Metadata.Name] = true
		if tp.Metadata.Labels["strimzi.io/cluster"] != kafkas[0].Metadata.Name || tp.Spec.Partitions <= 0 || tp.Spec.Replicas <= 0 {
			t.Errorf("KafkaTopic %s: cluster %q, %d partitions, %d replicas", tp.Metadata.Name, tp.Metadata.Labels["strimzi.io/cluster"], tp.Spec.Partitions, tp.Spec.Replicas)
		}
	}
	for _, topic := range []string{"taskmesh.task.events.v1", "taskmesh.quota.events.v1", "taskmesh.orchestration.events.v1", "taskmesh.pipeline.events.v1"} {
		if !topics[topic] {
			t.Errorf("no KafkaTopic %s", topic)
		}
	}
	for _, l := range kafkas[0].Spec.Kafka.Listeners {
		if l.Authentication == nil || !slices.Contains([]string{"scram-sha-512", "tls"}, l.Authentication.Type) ||
			!slices.Contains([]string{"internal", "cluster-ip", "route", "loadbalancer", "nodeport", "ingress"}, l.Type) {
			t.Errorf("Kafka listener %s: type %q, authentication %+v", l.Name, l.Type, l.Authentication)
		}
	}
	for _, np := range of[strimziNodePool](ms) {
		for _, r := range np.Spec.Roles {
			if r != "broker" && r != "controller" {
				t.Errorf("KafkaNodePool %s: role %q", np.Metadata.Name, r)
			}
		}
	}
}

// checkMonitoring: the ServiceMonitor scrapes the metrics ports, and the
// PrometheusRule carries exactly the groups of the alert rule file.
func checkMonitoring(t *testing.T, ms []manifest) {
	t.Helper()
	sms := of[monitoringv1.ServiceMonitor](ms)
	if len(sms) != 1 || len(sms[0].Spec.Endpoints) == 0 || sms[0].Spec.Endpoints[0].Port != "metrics" {
		t.Fatalf("want one ServiceMonitor of the metrics ports: %+v", sms)
	}
	rules := of[monitoringv1.PrometheusRule](ms)
	if len(rules) != 1 {
		t.Fatalf("%d PrometheusRules", len(rules))
	}
	root, _ := archtest.RepoRoot(".")
	b, err := os.ReadFile(filepath.Join(root, "deployments", "observability", "prometheus", "taskmesh-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(b, &file); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(file.Groups, rules[0].Spec.Groups) {
		t.Error("the PrometheusRule's groups differ from deployments/observability/prometheus/taskmesh-rules.yaml")
	}
}
