// Package e2e tests Taskmesh from the outside: the whole stack (Postgres,
// the embedded broker, scheduler, gateway) in-process, executor agents as
// real child processes running real task processes, and every call through
// the public REST API as a user or agent would make it.
//
// Every test builds its own world (a database cloned from the template, its
// own broker, services, addresses and directories), so the tests run in
// parallel, as many at a time as go test's -parallel (GOMAXPROCS by
// default). Much of a test's time is spent waiting for the stack: leases,
// sweeps, retries and intervals measured in seconds. A test that touches
// something the worlds share, such as the package's one Postgres server,
// must not call t.Parallel; Go runs it before the parallel ones start.
package e2e
