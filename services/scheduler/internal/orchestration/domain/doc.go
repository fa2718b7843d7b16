// Package domain holds the rules of task orchestration, pure and without
// I/O: task groups (serial, parallel, dag, repeat) and task templates, each
// an event-sourced aggregate of its own beside the task aggregate
// (internal/domain).
//
// # Groups
//
// A group's members are ordinary tasks. A member is "released" when its
// task is created, in the same transaction as the group's
// TaskGroupMembersReleased event, so a member can never get two tasks:
//
//	serial    every member at start, each depending on the one before
//	dag       every member at start, depending on its dependencies' tasks
//	parallel  every member at start, or max_parallel at a time
//	repeat    runs one by one, at most parallel at once, interval_sec
//	          between starts, a failed run again after backoff_sec
//
// Dependencies are the tasks' own depends_on: a claim skips a task whose
// dependencies have not all completed, so a dag child is claimable the
// moment its last parent completes, without the group being consulted.
//
// The group follows its members as a process manager: Advance looks at the
// members' tasks (Facts) and records what changed (TaskGroupMembersChanged),
// then decides what follows — cancel the rest of a failed serial group or
// the descendants of a failed dag member, release more members or runs,
// open a repeat's circuit breaker, end the group. Every decision is
// recorded as an event before anything acts on it, and Apply is the one
// fold of group events, so the group's state is rebuilt from its events
// alone. A client's command (Cancel, RetryMember) runs the first half of
// Advance before it decides, so it acts on the members as they are; a
// member's retry is the group's command, which puts the member back among
// the open ones, or refuses once the group has ended.
//
//	pending → running → completed | failed | cancelled
//
// A State may hold only the members that are not final (see State): every
// decision here needs no more than those and the group's counters, which
// keeps a pass cheap when a repeat has run ten thousand times.
//
// # Templates
//
// A template is a task definition with typed variables (string, int, bool,
// select); Render substitutes {{name}} in command, args, workdir and env
// values, each value inside the one string it replaces, never split into
// further arguments.
package domain
