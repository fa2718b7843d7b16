package postgres

// ClaimCandidates is claimCandidates, for tests that hold the transaction.
var ClaimCandidates = claimCandidates

// ActiveStatuses is the status predicate of task_views_active_idx.
const ActiveStatuses = activeStatuses

// ListQuery is TaskViews.List's statement.
var ListQuery = listQuery
