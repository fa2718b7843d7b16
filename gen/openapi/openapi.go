// Package openapi embeds the generated OpenAPI document.
//
// taskmesh.swagger.json is produced by `make generate` (protoc-gen-openapiv2,
// every public service merged into one file); this file is the only
// hand-written one in the directory and lets the gateway serve the document
// without reading it from disk.
package openapi

import _ "embed"

// JSON is the OpenAPI 2.0 document of the public REST API, exactly as
// generated. The gateway adds its security scheme and error envelope at serve
// time.
//
//go:embed taskmesh.swagger.json
var JSON []byte
