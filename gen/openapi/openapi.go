// Package openapi embeds the generated OpenAPI document.
//
// taskmesh.swagger.json is produced by `make generate` (protoc-gen-openapiv2,
// every public service merged into one file) and video.swagger.json likewise
// for the video API, whose JSON keys are the protos' json_name values; this
// file is the only hand-written one in the directory and lets the gateway
// serve the documents without reading them from disk.
package openapi

import _ "embed"

// JSON is the OpenAPI 2.0 document of the public REST API, exactly as
// generated. The gateway adds its security scheme and error envelope at serve
// time.
//
//go:embed taskmesh.swagger.json
var JSON []byte

// VideoJSON is the OpenAPI 2.0 document of the video API
// (docs/api/video.md), with its JSON key names. The gateway merges it into
// JSON.
//
//go:embed video.swagger.json
var VideoJSON []byte
