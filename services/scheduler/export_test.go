package scheduler

// LastPosition is the position PublishHistory publishes up to, for tests.
var LastPosition = lastPosition
