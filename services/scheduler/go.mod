module github.com/taskmesh/taskmesh/services/scheduler

go 1.26

require (
	github.com/taskmesh/taskmesh/gen v0.0.0
	github.com/taskmesh/taskmesh/platform v0.0.0
)

replace (
	github.com/taskmesh/taskmesh/gen => ../../gen
	github.com/taskmesh/taskmesh/platform => ../../platform
)
