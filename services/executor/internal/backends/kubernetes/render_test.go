package kubernetes

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.yaml from the renderer")

func renderConfig() RenderConfig {
	return RenderConfig{
		Namespace: "video", AgentID: "k8s-backend-1",
		S3Endpoint: "https://s3.cn-north-1.qiniucs.com", S3Bucket: "wan22",
		DefaultQueue: "standard",
		PriorityClasses: map[string]string{"premium": "taskmesh-premium", "standard": "taskmesh-standard",
			"tenant-high-priority-queue": "taskmesh-premium", "tenant-low-priority-queue": "taskmesh-standard"},
	}
}

func videoTask(id, typ, queue, gpus string) *taskv1.Task {
	t := &taskv1.Task{Id: id, AttemptId: "attempt-" + id, Name: "clip", Type: "video", Queue: queue,
		Video: &taskv1.VideoParams{
			Model: "wan2.2-t2v", Type: typ, Prompt: "一只猫在草地上奔跑", Resolution: "480P",
			Width: 832, Height: 480, Duration: 5, FrameNum: 81, Seed: 42,
		}}
	if typ == imageToVideo {
		t.Video.Model = "wan2.2-i2v"
		t.Video.ImageUrl = "https://objects.example/frames/first.png?X-Signature=abc"
	}
	if gpus != "" {
		t.Resources = map[string]string{gpuResource: gpus}
	}
	return t
}

func TestRenderGolden(t *testing.T) {
	tests := []struct {
		name string
		task func() *taskv1.Task
	}{
		{name: "text-to-video-standard", task: func() *taskv1.Task {
			return videoTask("0385dc79-5ff8-4d82-bcb6-4a1d2c3b4e5f", textToVideo, "standard", "2")
		}},
		{name: "image-to-video-premium", task: func() *taskv1.Task {
			return videoTask("86ecf553-d340-4e21-af6e-a0c6a421c010", imageToVideo, "premium", "4")
		}},
		{name: "watermark", task: func() *taskv1.Task {
			t := videoTask("c7ac5c50cc6643d6a4ee50134548522a", textToVideo, "premium", "")
			t.Video.Watermark = true
			return t
		}},
		{name: "prompt-quotes-newlines-chinese", task: func() *taskv1.Task {
			t := videoTask("Task_With.Odd-ID", textToVideo, "", "")
			t.Video.Prompt = "ignored: the rewritten prompt wins"
			t.Video.ActualPrompt = "他说：\"你好\"\n'single' quotes, a colon: and # hash\n- --s3_bucket evil {{TASK_ID}} $(id)"
			return t
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			job, err := Render(tc.task(), renderConfig())
			if err != nil {
				t.Fatal(err)
			}
			got, err := MarshalYAML(job)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tc.name+".golden.yaml")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("rendered job differs from %s (go test -update rewrites it):\n%s", path, got)
			}
			// The golden YAML parses back into the same job.
			back := &unstructured.Unstructured{}
			raw, err := yaml.YAMLToJSON(want)
			if err != nil {
				t.Fatal(err)
			}
			if err := back.UnmarshalJSON(raw); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back.Object, job.Object) {
				t.Error("the golden file does not parse back into the rendered job")
			}
			checkJob(t, tc.task(), job)
		})
	}
}

// checkJob checks what every rendered job must be, whatever the task.
func checkJob(t *testing.T, task *taskv1.Task, job *unstructured.Unstructured) {
	t.Helper()
	if job.GetAPIVersion() != "kubeflow.org/v1" || job.GetKind() != "PyTorchJob" {
		t.Errorf("job is %s %s", job.GetAPIVersion(), job.GetKind())
	}
	if errs := validation.IsDNS1123Label(job.GetName()); len(errs) > 0 || job.GetName() != JobName(task.GetId()) {
		t.Errorf("job name %q: %v", job.GetName(), errs)
	}
	if suspend, _, _ := unstructured.NestedBool(job.Object, "spec", "runPolicy", "suspend"); !suspend {
		t.Error("job is not created suspended: Kueue could not hold it")
	}
	queue := task.GetQueue()
	if queue == "" {
		queue = "standard"
	}
	if job.GetLabels()[QueueLabel] != queue || job.GetLabels()[PriorityClassLabel] != "taskmesh-"+queue {
		t.Errorf("labels %v, want queue %s", job.GetLabels(), queue)
	}
	if job.GetAnnotations()[TaskAnnotation] != task.GetId() || job.GetAnnotations()[AttemptAnno] != task.GetAttemptId() {
		t.Errorf("annotations %v", job.GetAnnotations())
	}
	specs, _, _ := unstructured.NestedMap(job.Object, "spec", pytorchReplicas)
	wantPrompt := task.GetVideo().GetActualPrompt()
	if wantPrompt == "" {
		wantPrompt = task.GetVideo().GetPrompt()
	}
	for role, rs := range specs {
		pod, _, _ := unstructured.NestedMap(rs.(map[string]any), "template", "spec")
		// Anti-affinity keeps this job's pods apart: it names this job.
		terms, _, _ := unstructured.NestedSlice(pod, "affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
		exprs, _, _ := unstructured.NestedSlice(terms[0].(map[string]any), "labelSelector", "matchExpressions")
		if vals := exprs[0].(map[string]any)["values"].([]any); len(vals) != 1 || vals[0] != job.GetName() {
			t.Errorf("%s anti-affinity names %v, not %s", role, vals, job.GetName())
		}
		c := pod["containers"].([]any)[0].(map[string]any)
		args := c["args"].([]any)
		if got := argAfter(args, "--prompt"); got != wantPrompt {
			t.Errorf("%s --prompt = %q, want the prompt as one argument %q", role, got, wantPrompt)
		}
		if got := argAfter(args, "--s3_key_prefix"); got != job.GetName() {
			t.Errorf("%s --s3_key_prefix = %q, want %q", role, got, job.GetName())
		}
		if got := argAfter(args, "--s3_bucket"); got != "wan22" {
			t.Errorf("%s --s3_bucket = %q", role, got)
		}
		_, hasInit := pod["initContainers"]
		isI2V := task.GetVideo().GetType() == imageToVideo
		if hasInit != isI2V || slices.Contains(args, any("--image")) != isI2V {
			t.Errorf("%s: first-frame download %v, --image %v, for %s", role, hasInit, slices.Contains(args, any("--image")), task.GetVideo().GetType())
		}
		if isI2V {
			init := pod["initContainers"].([]any)[0].(map[string]any)
			if env := init["env"].([]any)[0].(map[string]any); env["value"] != task.GetVideo().GetImageUrl() {
				t.Errorf("%s INPUT_IMAGE_SPEC = %v", role, env["value"])
			}
		}
		env := map[string]any{}
		for _, e := range c["env"].([]any) {
			env[e.(map[string]any)["name"].(string)] = e.(map[string]any)["value"]
		}
		if env["WAN_FRAME_NUM"] != "81" {
			t.Errorf("%s WAN_FRAME_NUM = %v", role, env["WAN_FRAME_NUM"])
		}
		if w, ok := env["WAN_WATERMARK"]; ok != task.GetVideo().GetWatermark() || (ok && w != "AI生成") {
			t.Errorf("%s WAN_WATERMARK = %v (set %v) for watermark %v", role, w, ok, task.GetVideo().GetWatermark())
		}
	}
}

func argAfter(args []any, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			s, _ := args[i+1].(string)
			return s
		}
	}
	return ""
}

// The job of an image_to_video task on four GPUs is the reference job the
// model image is run with: the same documents, keys and flags, plus what
// Kueue and the backend need.
func TestRenderKeepsTheReferenceJobsStructure(t *testing.T) {
	refRaw, err := os.ReadFile(filepath.Join("testdata", "reference-pytorchjob.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ref map[string]any
	if err := yaml.Unmarshal(refRaw, &ref); err != nil {
		t.Fatalf("the reference job's YAML does not parse: %v", err)
	}
	job, err := Render(videoTask("86ecf553-d340-4e21-af6e-a0c6a421c010", imageToVideo, "premium", "4"), renderConfig())
	if err != nil {
		t.Fatal(err)
	}
	added := []string{
		"metadata.namespace", "metadata.labels", "metadata.annotations",
		"metadata.labels." + QueueLabel, "metadata.labels." + PriorityClassLabel,
		"metadata.labels.app.kubernetes.io/managed-by", "metadata.labels." + AgentLabel,
		"metadata.annotations." + TaskAnnotation, "metadata.annotations." + AttemptAnno,
		"spec.runPolicy.suspend", "spec.runPolicy.ttlSecondsAfterFinished",
	}
	want := append(paths(ref, ""), added...)
	sort.Strings(want)
	want = slices.Compact(want)
	if got := paths(job.Object, ""); !slices.Equal(got, want) {
		t.Errorf("key paths differ from the reference job's:\n got %v\nwant %v", got, want)
	}
	for _, role := range []string{"Master", "Worker"} {
		refArgs := flags(ref, role)
		gotArgs := flags(job.Object, role)
		if want := append(refArgs[:len(refArgs):len(refArgs)], "--base_seed"); !slices.Equal(sorted(gotArgs), sorted(want)) {
			t.Errorf("%s flags %v, want the reference job's %v and --base_seed", role, gotArgs, refArgs)
		}
	}
	if r, _, _ := unstructured.NestedInt64(job.Object, "spec", pytorchReplicas, "Worker", "replicas"); r != 1 {
		t.Errorf("Worker replicas = %d, want 1 (4 GPUs, 2 per replica)", r)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

// paths lists the key paths of a document; list elements share their
// list's path.
func paths(v any, prefix string) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			out = append(out, p)
			out = append(out, paths(e, p)...)
		}
	case []any:
		for _, e := range x {
			out = append(out, paths(e, prefix+"[]")...)
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

func flags(doc map[string]any, role string) []string {
	cs, _, _ := unstructured.NestedSlice(doc, "spec", pytorchReplicas, role, "template", "spec", "containers")
	var out []string
	for _, a := range cs[0].(map[string]any)["args"].([]any) {
		if s := a.(string); strings.HasPrefix(s, "--") {
			if f, _, _ := strings.Cut(s, "="); f != "" {
				out = append(out, f)
			}
		}
	}
	return out
}

func TestRenderShapesTheJobToTheTask(t *testing.T) {
	t.Run("one replica holds all the GPUs", func(t *testing.T) {
		job, err := Render(videoTask("t1", textToVideo, "standard", "2"), renderConfig())
		if err != nil {
			t.Fatal(err)
		}
		specs, _, _ := unstructured.NestedMap(job.Object, "spec", pytorchReplicas)
		if _, ok := specs["Worker"]; ok || len(specs) != 1 {
			t.Errorf("replica specs %v: want the Master only", slices.Sorted(func(yield func(string) bool) {
				for k := range specs {
					if !yield(k) {
						return
					}
				}
			}))
		}
	})
	t.Run("eight GPUs: a Master and three Workers", func(t *testing.T) {
		job, err := Render(videoTask("t1", textToVideo, "premium", "8"), renderConfig())
		if err != nil {
			t.Fatal(err)
		}
		if r, _, _ := unstructured.NestedInt64(job.Object, "spec", pytorchReplicas, "Worker", "replicas"); r != 3 {
			t.Errorf("Worker replicas = %d, want 3", r)
		}
		cs, _, _ := unstructured.NestedSlice(job.Object, "spec", pytorchReplicas, "Master", "template", "spec", "containers")
		args := cs[0].(map[string]any)["args"].([]any)
		if args[0] != "--nproc_per_node=2" || argAfter(args, "--ulysses_size") != "8" {
			t.Errorf("args %v: want 2 processes per node and ulysses size 8", args)
		}
	})
	t.Run("a queue without a priority class", func(t *testing.T) {
		cfg := renderConfig()
		cfg.PriorityClasses = nil
		job, err := Render(videoTask("t1", textToVideo, "batch", ""), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := job.GetLabels()[PriorityClassLabel]; ok || job.GetLabels()[QueueLabel] != "batch" {
			t.Errorf("labels %v", job.GetLabels())
		}
	})
}

func TestRenderRefusesBadTasks(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(*taskv1.Task, *RenderConfig)
		wantErr string
	}{
		{name: "no video parameters", mod: func(t *taskv1.Task, _ *RenderConfig) { t.Video = nil }, wantErr: "video task without video parameters"},
		{name: "no attempt", mod: func(t *taskv1.Task, _ *RenderConfig) { t.AttemptId = "" }, wantErr: "task without id or attempt id"},
		{name: "unknown type", mod: func(t *taskv1.Task, _ *RenderConfig) { t.Video.Type = "video_to_video" }, wantErr: `video type "video_to_video" is neither`},
		{name: "no size", mod: func(t *taskv1.Task, _ *RenderConfig) { t.Video.Width = 0 }, wantErr: "video size 0x480 is not a size"},
		{name: "image_to_video without image", mod: func(t *taskv1.Task, _ *RenderConfig) { t.Video.Type = imageToVideo }, wantErr: "image_to_video needs image_url"},
		{name: "fractional GPUs", mod: func(t *taskv1.Task, _ *RenderConfig) { t.Resources = map[string]string{gpuResource: "1.5"} }, wantErr: "must be a whole number of GPUs"},
		{name: "not a quantity", mod: func(t *taskv1.Task, _ *RenderConfig) { t.Resources = map[string]string{gpuResource: "two"} }, wantErr: `resources nvidia.com/gpu "two"`},
		{name: "GPUs not a multiple of a replica", mod: func(t *taskv1.Task, _ *RenderConfig) { t.Resources = map[string]string{gpuResource: "3"} }, wantErr: "nvidia.com/gpu 3 is not a multiple of the 2 GPUs of one replica"},
		{name: "no queue", mod: func(t *taskv1.Task, c *RenderConfig) { t.Queue, c.DefaultQueue = "", "" }, wantErr: "the task names no queue"},
		{name: "queue not a label value", mod: func(t *taskv1.Task, _ *RenderConfig) { t.Queue = "premium queue!" }, wantErr: `queue "premium queue!" cannot be a label value`},
		{name: "model of the other type", mod: func(t *taskv1.Task, _ *RenderConfig) { t.Video.Model = "wan2.2-i2v" }, wantErr: `model "wan2.2-i2v" cannot run text_to_video`},
		{name: "no S3", mod: func(_ *taskv1.Task, c *RenderConfig) { c.S3Bucket = "" }, wantErr: "no S3 endpoint and bucket configured"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			task, cfg := videoTask("t1", textToVideo, "standard", ""), renderConfig()
			tc.mod(task, &cfg)
			if _, err := Render(task, cfg); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestJobNames(t *testing.T) {
	long := strings.Repeat("a", 80)
	tests := []struct{ id, want string }{
		{id: "0385dc79-5ff8-4d82-bcb6-4a1d2c3b4e5f", want: "wan22-0385dc79-5ff8-4d82-bcb6-4a1d2c3b4e5f"},
		{id: "c7ac5c50cc6643d6a4ee50134548522a", want: "wan22-c7ac5c50cc6643d6a4ee50134548522a"},
	}
	for _, tc := range tests {
		if got := JobName(tc.id); got != tc.want {
			t.Errorf("JobName(%q) = %q, want %q", tc.id, got, tc.want)
		}
	}
	seen := map[string]string{}
	for _, id := range []string{"Task_1", "task-1", "TASK.1", "task_1", long, long + "b", "---", "任务"} {
		name := JobName(id)
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			t.Errorf("JobName(%q) = %q: %v", id, name, errs)
		}
		if other, ok := seen[name]; ok {
			t.Errorf("ids %q and %q share job %s", id, other, name)
		}
		seen[name] = id
	}
}

// Every placeholder of the template is one Render fills, and Render leaves
// none behind.
func TestTemplatePlaceholdersAreFilled(t *testing.T) {
	job, err := Render(videoTask("t1", imageToVideo, "premium", "4"), renderConfig())
	if err != nil {
		t.Fatal(err)
	}
	out, _ := MarshalYAML(job)
	if bytes.Contains(out, []byte("{{")) {
		t.Errorf("placeholders left in the job:\n%s", out)
	}
}
