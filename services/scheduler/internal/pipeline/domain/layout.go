package domain

import (
	"fmt"
	"strings"
)

// The object layout of a job (docs/api/pipeline.md, "Artifacts"):
//
//	jobs/{job_id}/input/model.onnx, quant.zip, ref_images/NN-name
//	jobs/{job_id}/work/out.onnx       the ONNX stage's output, the BIE stage's input
//	jobs/{job_id}/output/result.bie, result.nef
//	jobs/{job_id}/logs/onnx.log, bie.log, nef.log

// ModelObject is where a job's model is kept.
func ModelObject(jobID string) string { return "jobs/" + jobID + "/input/model.onnx" }

// QuantObject is where a job's quantization archive is kept.
func QuantObject(jobID string) string { return "jobs/" + jobID + "/input/quant.zip" }

// RefImageObject is where a job's i-th reference image (from 0) is kept;
// name is the uploaded file's name, already safe as a key segment.
func RefImageObject(jobID string, i int, name string) string {
	return fmt.Sprintf("jobs/%s/input/ref_images/%02d-%s", jobID, i+1, name)
}

// OutputFile is the file stage s writes in its work directory.
func OutputFile(s Stage) string { return "out." + string(s) }

// OutputObject is where stage s's output is kept.
func OutputObject(jobID string, s Stage) string {
	if s == StageONNX {
		return "jobs/" + jobID + "/work/out.onnx"
	}
	return "jobs/" + jobID + "/output/result." + string(s)
}

// LogObject is where stage s's log is kept.
func LogObject(jobID string, s Stage) string { return "jobs/" + jobID + "/logs/" + string(s) + ".log" }

// StageRequestID is the request id of stage s's task: creating it twice
// returns the first task, so a stage is never queued twice.
func StageRequestID(jobID string, s Stage) string { return "pipeline/" + jobID + "/" + string(s) }

// ParseStageRequestID reads the job and stage back from a stage task's
// request id; ok is false for any other request id.
func ParseStageRequestID(requestID string) (jobID string, s Stage, ok bool) {
	rest, found := strings.CutPrefix(requestID, "pipeline/")
	if !found {
		return "", "", false
	}
	jobID, name, found := strings.Cut(rest, "/")
	if !found || jobID == "" {
		return "", "", false
	}
	s, ok = ParseStage(name)
	return jobID, s, ok
}
