package executor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/objectstore"
	"github.com/taskmesh/taskmesh/services/executor/internal/backends/kubernetes"
	"github.com/taskmesh/taskmesh/services/executor/internal/leaseconn"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// KubernetesConfig configures the Kubernetes backend: an executor that
// claims video tasks and runs each as a Kubeflow PyTorchJob queued by
// Kueue (docs/executor.md#the-kubernetes-backend) instead of as a local
// process.
type KubernetesConfig struct {
	// AgentID, MachineID, Labels, Server, Token and TLS are as for an agent.
	AgentID, MachineID string
	Labels             []string
	Server             string
	Token              string
	TLS                *tls.Config
	// Kubeconfig is the kubeconfig file; empty uses the in-cluster service
	// account (deployments/kubernetes/executor-kubernetes.yaml).
	Kubeconfig string
	// Namespace of the PyTorchJobs and of the Kueue LocalQueues.
	Namespace string
	// Slots bounds the jobs one backend holds (default 16).
	Slots int
	// Image is the model image; S3Endpoint, S3Bucket and S3Secret where the
	// jobs put the videos (S3Secret names the Secret with S3_ACCESS_KEY and
	// S3_SECRET_KEY); ModelRoot and OutputRoot the host directories of the
	// checkpoints and the output. Empty ones take the job template's
	// values, but the endpoint and bucket are required.
	Image, S3Endpoint, S3Bucket, S3Secret, ModelRoot, OutputRoot string
	// DefaultQueue is the LocalQueue of tasks that name none.
	DefaultQueue string
	// PriorityClasses maps a LocalQueue to its Kueue WorkloadPriorityClass.
	PriorityClasses map[string]string
	// GPUsPerReplica is the most GPUs one pod gets (default 2).
	GPUsPerReplica int
	// UploadVideos reads each succeeded job's video from the bucket and
	// uploads it as the task's result object (served as video_url); it
	// needs read access to the bucket: S3Region, S3AccessKey and
	// S3SecretKey (empty keys: the environment's or the instance role's).
	UploadVideos                       bool
	S3Region, S3AccessKey, S3SecretKey string
	// PollInterval of the job conditions (default 5 s).
	PollInterval time.Duration
	// AgentLostAfter is the scheduler's --agent-lost-after: the backend
	// deletes its jobs before the server may lease their tasks again
	// (docs/executor.md, "Fencing"); zero takes 15 s.
	AgentLostAfter time.Duration
	// HeartbeatInterval of the backend's heartbeat (zero: 5 s); at most
	// half the fence.
	HeartbeatInterval time.Duration
	Logger            *slog.Logger
}

// RunKubernetes runs the Kubernetes backend until ctx is cancelled. Jobs
// keep running in the cluster when it returns; a backend with the same
// agent id follows them again.
func RunKubernetes(ctx context.Context, cfg KubernetesConfig) error {
	if cfg.Server == "" {
		return errors.New("kubernetes backend: the server address is required")
	}
	rc, err := restConfig(cfg.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubernetes backend: %w", err)
	}
	client, err := dynamic.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes backend: %w", err)
	}
	logs, err := kubernetes.NewPodLogs(rc, client, cfg.Namespace)
	if err != nil {
		return fmt.Errorf("kubernetes backend: %w", err)
	}
	var videos kubernetes.VideoSource
	if cfg.UploadVideos {
		if videos, err = videoBucket(ctx, cfg); err != nil {
			return fmt.Errorf("kubernetes backend: the videos' bucket: %w", err)
		}
	}
	conn, err := leaseconn.Dial(cfg.Server, leaseconn.StaticToken(cfg.Token), cfg.TLS)
	if err != nil {
		return err
	}
	defer conn.Close()
	b, err := kubernetes.New(kubernetes.Config{
		AgentID: cfg.AgentID, MachineID: cfg.MachineID, Labels: cfg.Labels, Slots: cfg.Slots,
		PollInterval: cfg.PollInterval, AgentLostAfter: cfg.AgentLostAfter, HeartbeatInterval: cfg.HeartbeatInterval, Logger: cfg.Logger, Logs: logs, Videos: videos,
		Render: kubernetes.RenderConfig{
			Namespace: cfg.Namespace, Image: cfg.Image,
			S3Endpoint: cfg.S3Endpoint, S3Bucket: cfg.S3Bucket, S3Secret: cfg.S3Secret,
			ModelRoot: cfg.ModelRoot, OutputRoot: cfg.OutputRoot,
			DefaultQueue: cfg.DefaultQueue, PriorityClasses: cfg.PriorityClasses, GPUsPerReplica: cfg.GPUsPerReplica,
		},
	}, taskv1.NewLeaseServiceClient(conn), client)
	if err != nil {
		return err
	}
	return b.Run(ctx)
}

// videoBucket opens the bucket the jobs upload their videos to, at the
// endpoint the job template is given (https://host[:port]).
func videoBucket(ctx context.Context, cfg KubernetesConfig) (*objectstore.S3, error) {
	u, err := url.Parse(cfg.S3Endpoint)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("S3 endpoint %q is not a URL", cfg.S3Endpoint)
	}
	return objectstore.NewS3(ctx, objectstore.S3Config{
		Endpoint: u.Host, UseSSL: u.Scheme == "https", Bucket: cfg.S3Bucket, Region: cfg.S3Region,
		AccessKey: cfg.S3AccessKey, SecretKey: cfg.S3SecretKey,
	})
}

// restConfig reads a kubeconfig file, or the in-cluster configuration
// when none is given.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig given and not running in a cluster: %w", err)
		}
		return rc, nil
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	return rc, nil
}
