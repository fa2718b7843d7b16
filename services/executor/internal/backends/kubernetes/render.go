package kubernetes

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// jobTemplate is the model's reference PyTorchJob with placeholders
// (testdata/reference-pytorchjob.yaml is the job it was made from).
//
//go:embed pytorchjob.yaml
var jobTemplate []byte

// PyTorchJobs is the Kubeflow training operator's resource.
var PyTorchJobs = schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "pytorchjobs"}

// Labels and annotations the backend puts on its jobs.
const (
	// QueueLabel names the Kueue LocalQueue that admits the job.
	QueueLabel = "kueue.x-k8s.io/queue-name"
	// PriorityClassLabel names the Kueue WorkloadPriorityClass of the job.
	PriorityClassLabel = "kueue.x-k8s.io/priority-class"
	// AgentLabel marks the jobs of one backend, so a restarted backend finds
	// them again.
	AgentLabel      = "taskmesh.io/agent-id"
	TaskAnnotation  = "taskmesh.io/task-id"
	AttemptAnno     = "taskmesh.io/attempt-id"
	gpuResource     = "nvidia.com/gpu"
	jobNamePrefix   = "wan22-"
	imageToVideo    = "image_to_video"
	textToVideo     = "text_to_video"
	defaultGPUs     = 2
	maxLabelValue   = validation.LabelValueMaxLength
	watermarkText   = "AI生成"
	pytorchReplicas = "pytorchReplicaSpecs"
)

// RenderConfig is what a job needs besides the task.
type RenderConfig struct {
	// Namespace of the jobs (and of the Kueue LocalQueues).
	Namespace string
	// AgentID labels the jobs of this backend.
	AgentID string
	// Image is the model server image (default the reference job's).
	Image string
	// S3Endpoint, S3Bucket and S3Secret are where the job uploads the video
	// and the Secret holding S3_ACCESS_KEY / S3_SECRET_KEY.
	S3Endpoint, S3Bucket, S3Secret string
	// ModelRoot is the host directory of the checkpoints; OutputRoot the host
	// directory the video is written to before upload.
	ModelRoot, OutputRoot string
	// DefaultQueue is the LocalQueue of a task that names none.
	DefaultQueue string
	// PriorityClasses maps a LocalQueue to the WorkloadPriorityClass its jobs
	// carry; a queue not listed gets no class (Kueue's default priority).
	PriorityClasses map[string]string
	// GPUsPerReplica is the most GPUs one pod (Master or Worker) gets
	// (default 2, as in the reference job); a task asking for more runs on
	// Workers too.
	GPUsPerReplica int
}

func (c RenderConfig) withDefaults() RenderConfig {
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	if c.Image == "" {
		c.Image = "172.31.0.182/system_containers/wan22:1024"
	}
	if c.S3Secret == "" {
		c.S3Secret = "s3-credentials"
	}
	if c.ModelRoot == "" {
		c.ModelRoot = "/data/Wan-AI"
	}
	if c.OutputRoot == "" {
		c.OutputRoot = "/data/Wan-AI/output"
	}
	if c.GPUsPerReplica <= 0 {
		c.GPUsPerReplica = defaultGPUs
	}
	return c
}

// JobName is the PyTorchJob of a task: "wan22-" and the task id made a
// valid DNS-1123 label (lower case, [a-z0-9-], at most 63 characters; an
// id that had to be shortened keeps a hash of the original, so two ids
// never share a job).
func JobName(taskID string) string {
	return jobNamePrefix + dnsLabel(taskID, validation.DNS1123LabelMaxLength-len(jobNamePrefix))
}

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// dnsLabel turns s into a DNS-1123 label of at most max characters.
func dnsLabel(s string, max int) string {
	clean := strings.Trim(notDNS.ReplaceAllString(strings.ToLower(s), "-"), "-")
	if clean == s && len(clean) <= max && clean != "" {
		return clean
	}
	sum := sha256.Sum256([]byte(s))
	suffix := hex.EncodeToString(sum[:])[:8]
	keep := max - len(suffix) - 1
	if len(clean) > keep {
		clean = strings.Trim(clean[:keep], "-")
	}
	if clean == "" {
		return suffix
	}
	return clean + "-" + suffix
}

// labelValue makes s a valid label value (the agent id).
func labelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	return dnsLabel(s, maxLabelValue)
}

// Render builds the PyTorchJob of a claimed video task.
func Render(t *taskv1.Task, cfg RenderConfig) (*unstructured.Unstructured, error) {
	cfg = cfg.withDefaults()
	v := t.GetVideo()
	switch {
	case t.GetId() == "" || t.GetAttemptId() == "":
		return nil, errors.New("task without id or attempt id")
	case v == nil:
		return nil, errors.New("video task without video parameters")
	case v.GetType() != textToVideo && v.GetType() != imageToVideo:
		return nil, fmt.Errorf("video type %q is neither %s nor %s", v.GetType(), textToVideo, imageToVideo)
	case v.GetWidth() <= 0 || v.GetHeight() <= 0:
		return nil, fmt.Errorf("video size %dx%d is not a size", v.GetWidth(), v.GetHeight())
	case v.GetType() == imageToVideo && v.GetImageUrl() == "":
		return nil, errors.New("image_to_video needs image_url")
	case cfg.S3Endpoint == "" || cfg.S3Bucket == "":
		return nil, errors.New("no S3 endpoint and bucket configured for the videos")
	}
	gpus, err := taskGPUs(t)
	if err != nil {
		return nil, err
	}
	perReplica := min(gpus, cfg.GPUsPerReplica)
	if gpus%perReplica != 0 {
		return nil, fmt.Errorf("%s %d is not a multiple of the %d GPUs of one replica", gpuResource, gpus, perReplica)
	}
	replicas := gpus / perReplica
	queue := t.GetQueue()
	if queue == "" {
		queue = cfg.DefaultQueue
	}
	if queue == "" {
		return nil, errors.New("the task names no queue and no default queue is configured")
	}
	if errs := validation.IsValidLabelValue(queue); len(errs) > 0 {
		return nil, fmt.Errorf("queue %q cannot be a label value: %s", queue, strings.Join(errs, "; "))
	}
	prompt := v.GetActualPrompt()
	if prompt == "" {
		prompt = v.GetPrompt()
	}
	modelTask, ckpt, err := modelOf(v)
	if err != nil {
		return nil, err
	}
	frames := v.GetFrameNum()
	if frames <= 0 {
		frames = 81
	}
	watermark := ""
	if v.GetWatermark() {
		watermark = watermarkText
	}
	// One pass over every string value: text a value brings in (a prompt
	// holding "{{TASK_ID}}") is never replaced again.
	fill := strings.NewReplacer(
		"{{TASK_ID}}", dnsLabel(t.GetId(), validation.DNS1123LabelMaxLength-len(jobNamePrefix)),
		"{{TASK_ID_RAW}}", t.GetId(),
		"{{ATTEMPT_ID}}", t.GetAttemptId(),
		"{{AGENT_ID}}", labelValue(cfg.AgentID),
		"{{NAMESPACE}}", cfg.Namespace,
		"{{QUEUE}}", queue,
		"{{PRIORITY_CLASS}}", cfg.PriorityClasses[queue],
		"{{IMAGE}}", cfg.Image,
		"{{INPUT_IMAGE_SPEC}}", v.GetImageUrl(),
		"{{NPROC_PER_NODE}}", strconv.Itoa(perReplica),
		"{{MODEL_TASK}}", modelTask,
		"{{CKPT_DIR}}", ckpt,
		"{{MODEL_ROOT}}", strings.TrimRight(cfg.ModelRoot, "/"),
		"{{OUTPUT_ROOT}}", cfg.OutputRoot,
		"{{SIZE}}", fmt.Sprintf("%d*%d", v.GetWidth(), v.GetHeight()),
		"{{ULYSSES_SIZE}}", strconv.Itoa(gpus),
		"{{PROMPT}}", prompt,
		"{{SEED}}", strconv.Itoa(int(v.GetSeed())),
		"{{S3_ENDPOINT}}", cfg.S3Endpoint,
		"{{S3_BUCKET}}", cfg.S3Bucket,
		"{{S3_SECRET}}", cfg.S3Secret,
		"{{GPUS}}", strconv.Itoa(perReplica),
		"{{FRAME_NUM}}", strconv.Itoa(int(frames)),
		"{{WATERMARK}}", watermark,
	)
	raw, err := yaml.YAMLToJSON(jobTemplate)
	if err != nil {
		return nil, fmt.Errorf("job template: %w", err)
	}
	job := &unstructured.Unstructured{}
	if err := job.UnmarshalJSON(raw); err != nil {
		return nil, fmt.Errorf("job template: %w", err)
	}
	doc := substitute(job.Object, fill).(map[string]any)
	job.Object = doc

	if cfg.PriorityClasses[queue] == "" {
		labels := job.GetLabels()
		delete(labels, PriorityClassLabel)
		job.SetLabels(labels)
	}
	specs, _, _ := unstructured.NestedMap(doc, "spec", pytorchReplicas)
	if replicas == 1 {
		delete(specs, "Worker")
	} else if w, ok := specs["Worker"].(map[string]any); ok {
		w["replicas"] = int64(replicas - 1)
	}
	for _, rs := range specs {
		pod, _, _ := unstructured.NestedMap(rs.(map[string]any), "template", "spec")
		shapePod(pod, v.GetType() == imageToVideo, watermark != "")
		_ = unstructured.SetNestedMap(rs.(map[string]any), pod, "template", "spec")
	}
	if err := unstructured.SetNestedMap(doc, specs, "spec", pytorchReplicas); err != nil {
		return nil, err
	}
	return job, nil
}

// modelOf picks generate.py's --task and the checkpoint directory from the
// model (wan2.2-t2v, wan2.2-i2v); a model that names neither follows the
// video type. A model that cannot do the type is refused.
func modelOf(v *taskv1.VideoParams) (task, ckpt string, err error) {
	model := strings.ToLower(v.GetModel())
	i2v := v.GetType() == imageToVideo
	switch {
	case strings.Contains(model, "i2v") && !i2v, strings.Contains(model, "t2v") && i2v:
		return "", "", fmt.Errorf("model %q cannot run %s", v.GetModel(), v.GetType())
	case i2v:
		return "i2v-A14B", "Wan2.2-I2V-A14B", nil
	}
	return "t2v-A14B", "Wan2.2-T2V-A14B", nil
}

// taskGPUs is the task's nvidia.com/gpu resource: the job's GPUs across
// all its replicas (default 2).
func taskGPUs(t *taskv1.Task) (int, error) {
	raw, ok := t.GetResources()[gpuResource]
	if !ok {
		return defaultGPUs, nil
	}
	q, err := resource.ParseQuantity(raw)
	if err != nil {
		return 0, fmt.Errorf("resources %s %q: %w", gpuResource, raw, err)
	}
	n, exact := q.AsInt64()
	if !exact || n < 1 || n > 64 {
		return 0, fmt.Errorf("resources %s %q must be a whole number of GPUs from 1 to 64", gpuResource, raw)
	}
	return int(n), nil
}

// shapePod drops what a task does not use from one replica's pod: the
// first-frame download and the --image argument for text_to_video, the
// watermark variable without a watermark.
func shapePod(pod map[string]any, withImage, withWatermark bool) {
	if !withImage {
		delete(pod, "initContainers")
		pod["volumes"] = without(pod["volumes"], "image-volume")
	}
	containers, _ := pod["containers"].([]any)
	for _, c := range containers {
		c := c.(map[string]any)
		if !withImage {
			c["volumeMounts"] = without(c["volumeMounts"], "image-volume")
			c["args"] = withoutFlag(c["args"], "--image")
		}
		if !withWatermark {
			c["env"] = without(c["env"], "WAN_WATERMARK")
		}
	}
}

// without drops the entries named name from a list of objects.
func without(list any, name string) []any {
	items, _ := list.([]any)
	out := make([]any, 0, len(items))
	for _, it := range items {
		if m, ok := it.(map[string]any); ok && m["name"] == name {
			continue
		}
		out = append(out, it)
	}
	return out
}

// withoutFlag drops a flag and its value from an argument list.
func withoutFlag(list any, flag string) []any {
	args, _ := list.([]any)
	out := make([]any, 0, len(args))
	for i := 0; i < len(args); i++ {
		if args[i] == flag {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// substitute replaces placeholders in every string value of a parsed
// document.
func substitute(v any, fill *strings.Replacer) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = substitute(e, fill)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = substitute(e, fill)
		}
		return x
	case string:
		return fill.Replace(x)
	}
	return v
}

// MarshalYAML renders a job as YAML with sorted keys, the form of the
// golden files.
func MarshalYAML(job *unstructured.Unstructured) ([]byte, error) {
	return yaml.Marshal(job.Object)
}
