// Package kubernetes is the cluster operator that writes the MFS custom
// resources (MFSRayCluster, MFSWorkGroup of group mfs.taskmesh.io,
// deployments/kubernetes/50-mfs-crds.yaml) with client-go's dynamic client
// and reads the status the in-cluster MFS operator reports on them; Watch
// wakes the process manager when a resource changes.
//
// Spec generations: the quota service's WorkGroup generation is written to
// the annotation taskmesh.io/spec-generation, and the MFS operator reports
// the one it acted on in status.observedGeneration, so a status about an
// older spec is never taken for the current one.
package kubernetes

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

// Group, version and resources of the MFS custom resources.
var (
	RayClusters = schema.GroupVersionResource{Group: "mfs.taskmesh.io", Version: "v1", Resource: "mfsrayclusters"}
	WorkGroups  = schema.GroupVersionResource{Group: "mfs.taskmesh.io", Version: "v1", Resource: "mfsworkgroups"}
)

// Labels and annotations written on every resource.
const (
	LabelManagedBy      = "app.kubernetes.io/managed-by"
	LabelTenant         = "taskmesh.io/tenant"
	LabelCluster        = "taskmesh.io/cluster"
	LabelQuota          = "taskmesh.io/quota"
	AnnotSpecGeneration = "taskmesh.io/spec-generation"
	managedBy           = "taskmesh-quota"
)

// Operator implements the quota service's cluster operator on Kubernetes.
type Operator struct {
	client    dynamic.Interface
	namespace string
}

// New returns an operator writing into namespace.
func New(client dynamic.Interface, namespace string) *Operator {
	return &Operator{client: client, namespace: namespace}
}

// RayClusterObject is the MFSRayCluster written for spec.
func RayClusterObject(namespace string, spec capacity.RaySpec) *unstructured.Unstructured {
	o := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "mfs.taskmesh.io/v1",
		"kind":       "MFSRayCluster",
		"metadata": map[string]any{
			"name": spec.Name, "namespace": namespace,
			"labels": map[string]any{LabelManagedBy: managedBy, LabelTenant: spec.TenantID, LabelCluster: spec.Cluster},
		},
		"spec": map[string]any{
			"tenantId": spec.TenantID,
			"cluster":  spec.Cluster,
		},
	}}
	if spec.CUQuotaID != "" {
		_ = unstructured.SetNestedMap(o.Object, map[string]any{"id": spec.CUQuotaID, "name": spec.CUQuotaName}, "spec", "cuQuota")
	}
	return o
}

func quotaNode(n capacity.QuotaNode) map[string]any {
	m := map[string]any{"id": n.ID, "name": n.Name, "min": n.Min, "max": n.Max}
	if len(n.Children) > 0 {
		children := make([]any, 0, len(n.Children))
		for _, c := range n.Children {
			children = append(children, quotaNode(c))
		}
		m["children"] = children
	}
	return m
}

// WorkGroupObject is the MFSWorkGroup written for spec: the second-level
// quota (never the root) with its subtree nested at any depth.
func WorkGroupObject(namespace string, spec capacity.WorkGroupSpec) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "mfs.taskmesh.io/v1",
		"kind":       "MFSWorkGroup",
		"metadata": map[string]any{
			"name": spec.Name, "namespace": namespace,
			"labels": map[string]any{LabelManagedBy: managedBy, LabelTenant: spec.TenantID, LabelCluster: spec.Cluster,
				LabelQuota: spec.QuotaID},
			"annotations": map[string]any{AnnotSpecGeneration: strconv.FormatInt(spec.Generation, 10)},
		},
		"spec": map[string]any{
			"tenantId":    spec.TenantID,
			"cluster":     spec.Cluster,
			"rayCluster":  spec.RayCluster,
			"machineType": spec.MachineType,
			"gpus":        spec.GPUs,
			"quota":       quotaNode(spec.Quota),
		},
	}}
}

// rejected wraps errors that can never succeed as they are: the resource
// type is not installed (404 on create) or the object is refused (422).
func rejected(kind, name string, err error) error {
	if apierrors.IsNotFound(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		return fmt.Errorf("%w: %s %s: %v", capacity.ErrOperatorRejected, kind, name, err)
	}
	return fmt.Errorf("%s %s: %w", kind, name, err)
}

// apply creates want, or replaces the spec, labels and annotations of the
// existing object when they differ (nothing is written when they match).
func (o *Operator) apply(ctx context.Context, gvr schema.GroupVersionResource, want *unstructured.Unstructured) error {
	res := o.client.Resource(gvr).Namespace(o.namespace)
	cur, err := res.Get(ctx, want.GetName(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := res.Create(ctx, want, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return rejected(want.GetKind(), want.GetName(), err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("%s %s: %w", want.GetKind(), want.GetName(), err)
	}
	if reflect.DeepEqual(cur.Object["spec"], want.Object["spec"]) && reflect.DeepEqual(cur.GetLabels(), want.GetLabels()) &&
		reflect.DeepEqual(cur.GetAnnotations(), want.GetAnnotations()) {
		return nil
	}
	cur.Object["spec"] = want.Object["spec"]
	cur.SetLabels(want.GetLabels())
	cur.SetAnnotations(want.GetAnnotations())
	if _, err := res.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return rejected(want.GetKind(), want.GetName(), err)
	}
	return nil
}

// observe reads an object's status.
func (o *Operator) observe(ctx context.Context, gvr schema.GroupVersionResource, name string) (capacity.Observation, error) {
	cur, err := o.client.Resource(gvr).Namespace(o.namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return capacity.Observation{Phase: capacity.PhaseAbsent}, nil
	}
	if err != nil {
		return capacity.Observation{}, fmt.Errorf("%s %s: %w", gvr.Resource, name, err)
	}
	return Observation(cur), nil
}

// Observation maps an object's status to the quota service's terms:
// status.phase Running or Ready → Running, Failed → Failed (with
// status.reason), anything else (none yet, Pending, Creating) → Pending.
func Observation(obj *unstructured.Unstructured) capacity.Observation {
	phase, _, _ := unstructured.NestedString(obj.Object, "status", "phase")
	reason, _, _ := unstructured.NestedString(obj.Object, "status", "reason")
	endpoint, _, _ := unstructured.NestedString(obj.Object, "status", "endpoint")
	gen, _, _ := unstructured.NestedInt64(obj.Object, "status", "observedGeneration")
	o := capacity.Observation{Phase: capacity.PhasePending, Reason: reason, Generation: gen, Endpoint: endpoint}
	switch phase {
	case "Running", "Ready":
		o.Phase = capacity.PhaseRunning
	case "Failed":
		o.Phase = capacity.PhaseFailed
	}
	return o
}

// ApplyRayCluster implements the cluster operator.
func (o *Operator) ApplyRayCluster(ctx context.Context, spec capacity.RaySpec) error {
	return o.apply(ctx, RayClusters, RayClusterObject(o.namespace, spec))
}

// RayClusterStatus implements the cluster operator.
func (o *Operator) RayClusterStatus(ctx context.Context, spec capacity.RaySpec) (capacity.Observation, error) {
	return o.observe(ctx, RayClusters, spec.Name)
}

// ApplyWorkGroup implements the cluster operator.
func (o *Operator) ApplyWorkGroup(ctx context.Context, spec capacity.WorkGroupSpec) error {
	return o.apply(ctx, WorkGroups, WorkGroupObject(o.namespace, spec))
}

// WorkGroupStatus implements the cluster operator.
func (o *Operator) WorkGroupStatus(ctx context.Context, spec capacity.WorkGroupSpec) (capacity.Observation, error) {
	return o.observe(ctx, WorkGroups, spec.Name)
}

// DeleteWorkGroup implements the cluster operator: a WorkGroup that is not
// there is deleted already.
func (o *Operator) DeleteWorkGroup(ctx context.Context, spec capacity.WorkGroupSpec) error {
	err := o.client.Resource(WorkGroups).Namespace(o.namespace).Delete(ctx, spec.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("MFSWorkGroup %s: %w", spec.Name, err)
	}
	return nil
}

// Watch calls onChange whenever an MFS resource of the namespace changes
// (the MFS operator updated a status, someone deleted one), until ctx is
// done, so the process manager acts at once instead of at its next pass.
// A broken watch is opened again after a pause.
func (o *Operator) Watch(ctx context.Context, onChange func()) {
	for _, gvr := range []schema.GroupVersionResource{RayClusters, WorkGroups} {
		go func() {
			for ctx.Err() == nil {
				w, err := o.client.Resource(gvr).Namespace(o.namespace).Watch(ctx, metav1.ListOptions{})
				if err == nil {
					for range w.ResultChan() {
						onChange()
					}
					w.Stop()
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}()
	}
}
