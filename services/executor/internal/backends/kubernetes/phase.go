package kubernetes

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Phase is where a PyTorchJob stands, as the lease API sees it.
type Phase int

const (
	// Queued: created, or held (suspended) by Kueue; the task stays
	// assigned and its lease is renewed.
	Queued Phase = iota
	// Running: admitted and running (or restarting a replica).
	Running
	// Succeeded: the video is in S3.
	Succeeded
	// Failed: the job gave up.
	Failed
)

func (p Phase) String() string {
	switch p {
	case Running:
		return "running"
	case Succeeded:
		return "succeeded"
	case Failed:
		return "failed"
	}
	return "queued"
}

// JobPhase reads the job's status.conditions (the training operator's
// Created, Running, Restarting, Succeeded, Failed, and Suspended, which
// Kueue's suspend produces). A final condition wins; a job suspended
// again after running (Kueue evicted it) is queued again. For Failed the
// condition's message (or reason) is returned.
func JobPhase(job *unstructured.Unstructured) (Phase, string) {
	conds, _, _ := unstructured.NestedSlice(job.Object, "status", "conditions")
	active := map[string]bool{}
	msgs := map[string]string{}
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		typ, _ := m["type"].(string)
		status, _ := m["status"].(string)
		if status != "True" {
			continue
		}
		active[typ] = true
		msg, _ := m["message"].(string)
		if msg == "" {
			msg, _ = m["reason"].(string)
		}
		msgs[typ] = msg
	}
	switch {
	case active["Succeeded"]:
		return Succeeded, ""
	case active["Failed"]:
		msg := msgs["Failed"]
		if msg == "" {
			msg = "PyTorchJob failed"
		}
		return Failed, msg
	case active["Suspended"]:
		return Queued, ""
	case active["Running"] || active["Restarting"]:
		return Running, ""
	}
	return Queued, ""
}
