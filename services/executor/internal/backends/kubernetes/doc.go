// Package kubernetes is the executor's Kubernetes backend for video tasks
// (docs/executor.md#the-kubernetes-backend): it claims video tasks through
// the lease API like an agent, but instead of running a process it renders
// the model's PyTorchJob (an embedded template, pytorchjob.yaml) and
// submits it with client-go's dynamic client. Kueue holds the job
// (spec.runPolicy.suspend and the kueue.x-k8s.io/queue-name label) until
// its ClusterQueue has quota; the training operator then runs it and the
// model uploads the video to S3.
//
// The backend follows each job and maps its conditions to the lease API:
//
//	no condition, Created, Suspended  → still assigned (the lease is renewed)
//	Running, Restarting               → StartTask; progress from the job (below)
//	Succeeded                         → the video uploaded as the result object; CompleteTask, exit 0,
//	                                    stdout = the video's S3 location (JSON)
//	Failed                            → CompleteTask, exit 1, error = the condition's message
//
// A run reports like an agent's: while the job runs, its progress — the
// job's taskmesh.io/progress annotation, else the last
// "::progress::<0-100> [message]" line of the master pod's log — goes to
// ReportTaskProgress, and so to the task and its live streams. When it
// succeeds, the video the model put in the bucket (VideoKey) is read and
// uploaded through the lease API's presigned upload, so the video API
// serves it as video_url; a succeeded job without a readable video fails
// its task.
//
// A cancel or preemption from the server (heartbeat stop list), a lost
// lease, and a job that vanished end the attempt; the backend deletes the
// job (its pods go with it). State lives in the cluster: a restarted backend
// finds its jobs by the taskmesh.io/agent-id label and carries on.
package kubernetes
