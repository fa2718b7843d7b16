// Package e2e tests Taskmesh from the outside: the whole stack (Postgres,
// the embedded broker, scheduler, gateway) in-process, executor agents as
// real child processes running real task processes, and every call through
// the public REST API as a user or agent would make it.
package e2e
