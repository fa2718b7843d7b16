// Package domain is the model-conversion job of the pipeline API: pure
// decisions with no I/O, the clock passed in. A job takes an ONNX model and
// a quantization archive through the fixed stages onnx → bie → nef, each
// run as a scheduler task by an agent of that stage's pool; its status is
// the stage it is in, then COMPLETED or FAILED (docs/api/pipeline.md).
//
// Each command is a method of Job that returns the events to record (nil
// when the command changes nothing, so a repeated command is harmless), and
// Apply folds an event into the job. The job is the fold of its events, so
// it can always be rebuilt from them.
//
// States:
//
//	ONNX → BIE → NEF → COMPLETED   (a stage's task completed with its output)
//	ONNX | BIE | NEF → FAILED      (a stage's task failed, was cancelled or
//	                                 deleted, or could not be queued)
//
// A stage task reports its outcome to the job it was queued for only while
// the job is in that stage: an outcome that arrives again, late, or for
// another stage changes nothing.
package domain
