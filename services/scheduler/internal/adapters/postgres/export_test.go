package postgres

// ClaimCandidates is claimCandidates, for tests that hold the transaction.
var ClaimCandidates = claimCandidates
