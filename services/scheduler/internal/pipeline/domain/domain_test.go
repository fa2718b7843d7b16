package domain

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func submitted() Job {
	return Fold(Submit(t0, "j1", "acme", "key_1", "10.0.0.7",
		Inputs{Model: ModelObject("j1"), Quant: QuantObject("j1")}, InputKeys{Model: "uploads/a/model.onnx", Quant: "uploads/b/quant.zip"}))
}

func apply(j Job, rs []Record) Job {
	for _, r := range rs {
		j = Apply(j, r)
	}
	return j
}

func TestHappyPathRunsEveryStageInOrder(t *testing.T) {
	j := submitted()
	if j.Status != StatusONNX || j.Stage != StageONNX || j.Version != 1 || j.CreatedBy != "key_1" {
		t.Fatalf("submitted: %+v", j)
	}
	for i, s := range Stages() {
		at := t0.Add(time.Duration(i+1) * time.Minute)
		j = apply(j, j.QueueStage(at, "pipeline", s, "t-"+string(s)))
		j = apply(j, j.ReportProgress(at, "pipeline", s, "t-"+string(s), 40, "half"))
		if j.Progress != 40 || j.Status != s.Status() {
			t.Fatalf("stage %s: %+v", s, j)
		}
		j = apply(j, j.StageDone(at, "pipeline", s, "t-"+string(s), OutputObject("j1", s)))
	}
	want := map[Stage]string{StageONNX: "jobs/j1/work/out.onnx", StageBIE: "jobs/j1/output/result.bie", StageNEF: "jobs/j1/output/result.nef"}
	if j.Status != StatusCompleted || j.Stage != StageNEF || j.Progress != 100 || !reflect.DeepEqual(j.Outputs, want) || j.Error != nil {
		t.Fatalf("completed: %+v", j)
	}
	if j.Version != 1+3*3 {
		t.Errorf("version %d, want 10", j.Version)
	}
}

func TestCommandsThatChangeNothingRecordNothing(t *testing.T) {
	j := submitted()
	j = apply(j, j.QueueStage(t0, "p", StageONNX, "t1"))
	done := apply(j, j.StageDone(t0, "p", StageONNX, "t1", "o"))
	failed := apply(j, j.Fail(t0, "p", StageONNX, "t1", "boom"))
	cases := []struct {
		name string
		got  []Record
	}{
		{"queue a stage twice", j.QueueStage(t0, "p", StageONNX, "t2")},
		{"queue a stage the job is not in", j.QueueStage(t0, "p", StageBIE, "t2")},
		{"a foreign task completes the stage", j.StageDone(t0, "p", StageONNX, "other", "o")},
		{"a foreign task fails the stage", j.Fail(t0, "p", StageONNX, "other", "x")},
		{"a foreign task reports progress", j.ReportProgress(t0, "p", StageONNX, "other", 5, "")},
		{"the same progress again", apply(j, j.ReportProgress(t0, "p", StageONNX, "t1", 5, "m")).ReportProgress(t0, "p", StageONNX, "t1", 5, "m")},
		{"the stage completes twice", done.StageDone(t0, "p", StageONNX, "t1", "o")},
		{"a late failure of a completed stage", done.Fail(t0, "p", StageONNX, "t1", "late")},
		{"progress after the stage moved on", done.ReportProgress(t0, "p", StageONNX, "t1", 50, "")},
		{"a failed job's stage completes", failed.StageDone(t0, "p", StageONNX, "t1", "o")},
		{"a failed job fails again", failed.Fail(t0, "p", StageONNX, "t1", "again")},
	}
	for _, c := range cases {
		if c.got != nil {
			t.Errorf("%s: recorded %+v", c.name, c.got)
		}
	}
}

func TestAStageMayReportBeforeItIsRecordedAsQueued(t *testing.T) {
	// The stage task is created before StageQueued is recorded; a fast
	// task can complete in between, and its outcome still counts.
	j := submitted()
	j = apply(j, j.StageDone(t0, "p", StageONNX, "t1", "o"))
	if j.Status != StatusBIE || j.StageTasks[StageONNX] != "t1" {
		t.Fatalf("%+v", j)
	}
	if rs := j.QueueStage(t0, "p", StageONNX, "t1"); rs != nil {
		t.Errorf("late StageQueued recorded: %+v", rs)
	}
}

func TestFailureKeepsStepReasonAndTask(t *testing.T) {
	j := submitted()
	j = apply(j, j.QueueStage(t0, "p", StageONNX, "t1"))
	j = apply(j, j.StageDone(t0, "p", StageONNX, "t1", "o"))
	j = apply(j, j.Fail(t0.Add(time.Second), "p", StageBIE, "t2", "  quant.zip is not a zip archive \n"))
	want := &Failure{Step: StageBIE, Reason: "quant.zip is not a zip archive"}
	if j.Status != StatusFailed || j.Stage != StageBIE || !reflect.DeepEqual(j.Error, want) || j.StageTasks[StageBIE] != "t2" {
		t.Fatalf("%+v", j)
	}
	if got := submitted().Fail(t0, "p", StageONNX, "", ""); got[0].Event.(Failed).Reason != "the onnx stage failed" {
		t.Errorf("empty reason: %+v", got)
	}
}

func TestFoldDoesNotShareMaps(t *testing.T) {
	j := submitted()
	a := apply(j, j.QueueStage(t0, "p", StageONNX, "t1"))
	b := apply(a, a.StageDone(t0, "p", StageONNX, "t1", "o"))
	if _, ok := a.Outputs[StageONNX]; ok {
		t.Error("a later state's output leaked into an earlier state")
	}
	if b.StageTasks[StageONNX] != "t1" {
		t.Errorf("%+v", b)
	}
}

func TestStageRequestIDRoundTrips(t *testing.T) {
	for _, s := range Stages() {
		id, got, ok := ParseStageRequestID(StageRequestID("0f8c-1", s))
		if !ok || id != "0f8c-1" || got != s {
			t.Errorf("%s: %q %q %v", s, id, got, ok)
		}
	}
	for _, bad := range []string{"", "pipeline/", "pipeline//onnx", "pipeline/j1/xyz", "pipeline/j1", "other/j1/onnx"} {
		if _, _, ok := ParseStageRequestID(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestProgressIsClampedAndCut(t *testing.T) {
	j := submitted()
	if p := apply(j, j.ReportProgress(t0, "p", StageONNX, "t", 250, "")).Progress; p != 100 {
		t.Errorf("progress %d", p)
	}
	// 86 three-byte characters are 258 bytes: the message keeps 85 (255).
	if m := apply(j, j.ReportProgress(t0, "p", StageONNX, "t", 10, strings.Repeat("日", 86))).Message; m != strings.Repeat("日", 85) {
		t.Errorf("message of %d bytes, want the 85 characters that fit in 256 bytes", len(m))
	}
}

func TestCheckStart(t *testing.T) {
	cases := []struct {
		kind Kind
		head string
		ok   bool
		msg  string
	}{
		{KindModel, "\x08\x07\x12\x07pytorch", true, ""}, // ir_version 7, producer_name
		{KindModel, "\x3a\x10", true, ""},                // graph first
		{KindModel, "\x08", true, ""},                    // a varint field's tag is enough
		{KindModel, "not a model at all", false, ""},     // 'n' = field 13, wire 6
		{KindModel, "\x0a\x03abc", false, ""},            // field 1 as bytes: not ir_version
		{KindModel, "", false, ""},
		{KindModel, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", false, ""},
		{KindQuant, "PK\x03\x04\x14\x00", true, ""},
		{KindQuant, "PK\x05\x06", true, ""},
		{KindQuant, "\x1f\x8b\x08", false, ""}, // gzip
		{KindRefImage, "\x89PNG\r\n\x1a\n....", true, ""},
		{KindRefImage, "\xff\xd8\xff\xe0", true, ""},
		{KindRefImage, "BM....", true, ""},
		{KindRefImage, "RIFF\x00\x00\x00\x00WEBPVP8 ", true, ""},
		{KindRefImage, "GIF89a\x01\x00\x01\x00", false, "is a gif image; a reference image is JPEG, PNG, BMP or WEBP"},
		{KindRefImage, "GIF87a", false, "is a gif image"},
		{KindRefImage, "GIF", false, "is not a JPEG, PNG, BMP or WEBP image"},
		{KindRefImage, "text", false, "is not a JPEG, PNG, BMP or WEBP image"},
	}
	for _, c := range cases {
		err := c.kind.CheckStart([]byte(c.head))
		if (err == nil) != c.ok {
			t.Errorf("%s %q: err = %v, want ok %v", c.kind, c.head, err, c.ok)
		}
		if c.msg != "" && (err == nil || !strings.Contains(err.Error(), c.msg)) {
			t.Errorf("%s %q: err = %v, want %q", c.kind, c.head, err, c.msg)
		}
	}
}

func TestParseKindAndUploadName(t *testing.T) {
	for _, bad := range []string{"", "Model", "weights"} {
		if _, err := ParseKind(bad); err == nil {
			t.Errorf("kind %q accepted", bad)
		}
	}
	names := map[string]string{"cat.png": "cat.png", `C:\pics\dog 1.jpg`: "dog_1.jpg", "../../etc/passwd": "passwd",
		"...": "_", "日本.png": "__.png", "": "image"}
	for in, want := range names {
		if got := UploadName(KindRefImage, in); got != want {
			t.Errorf("UploadName(%q) = %q, want %q", in, got, want)
		}
	}
	if UploadName(KindModel, "x.bin") != "model.onnx" || UploadName(KindQuant, "") != "quant.zip" {
		t.Error("model and quant names")
	}
}

func TestJobRequestCheck(t *testing.T) {
	many := make([]string, MaxRefImages+1)
	for i := range many {
		many[i] = string(rune('a' + i%26))
	}
	cases := []struct {
		r     JobRequest
		field string
	}{
		{JobRequest{QuantKey: "q"}, "model_key"},
		{JobRequest{ModelKey: "m"}, "quant_key"},
		{JobRequest{ModelKey: "m", QuantKey: "q", RefImageKeys: many}, "ref_image_keys"},
		{JobRequest{ModelKey: "m", QuantKey: "q", RefImageKeys: []string{"a", "a"}}, "ref_image_keys[1]"},
		{JobRequest{ModelKey: "m", QuantKey: "q", RefImageKeys: []string{""}}, "ref_image_keys[0]"},
		{JobRequest{ModelKey: "m", QuantKey: "q", RefImageKeys: []string{"a", "b"}}, ""},
	}
	for _, c := range cases {
		err := c.r.Check()
		var ie *InvalidError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%+v: %v", c.r, err)
		case c.field != "" && (!errors.As(err, &ie) || ie.Field != c.field):
			t.Errorf("%+v: err %v, want field %s", c.r, err, c.field)
		}
	}
}
