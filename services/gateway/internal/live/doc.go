// Package live pushes task progress to clients as it happens: Server-Sent
// Events and WebSocket streams of one task, fed by the task event topic
// (docs/api/tasks.md#live-task-streams; each gateway tails the topic
// itself, docs/decisions/0020-live-streams-tail-the-topic.md).
//
// A Hub tails taskmesh.task.events.v1 from its end, without a consumer
// group (every gateway replica tails on its own), and fans each event out to
// the subscribers of its task through bounded buffers: a subscriber whose
// buffer is full is dropped with ErrSlowConsumer, so a slow client never
// holds up the tail or anyone else.
//
// A stream (ServeSSE, ServeWebSocket) first reads the task from the
// scheduler as the caller — which is both the tenant check (another
// tenant's task is 404, and nothing is streamed) and the read-your-writes
// snapshot — then sends it when it is newer than the client's resume point
// (Last-Event-ID or after_version), then the hub's events above it in
// version order, deduplicated by version, with gaps filled from the
// scheduler. It ends after the final state: completed, cancelled, failed
// with no retry following, or deleted. Frame ids are task versions, so a
// client that reconnects with its last id misses nothing, the final state
// included.
//
// What a frame says is a View: TaskView for the task API; another API
// registers the same two routes under its own prefix with its own view
// (Service.Register). The video API's (Service.RegisterVideo) first reads
// the generation through the video API itself, so its streams refuse and
// report UNKNOWN exactly as its GET answer does, and its SUCCEEDED frame
// carries the video's link.
package live
