module github.com/taskmesh/taskmesh/services/quota

go 1.26

replace (
	github.com/taskmesh/taskmesh/gen => ../../gen
	github.com/taskmesh/taskmesh/platform => ../../platform
)
