// Command protosrc writes the .proto sources of the third-party schemas our
// protos import (google/api HTTP annotations, buf/validate rules, the
// openapiv2 options) by printing the file descriptors compiled into the Go
// packages this workspace pins. The printed schemas therefore always match
// the runtime libraries, and code generation needs no network or registry.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/jhump/protoreflect/desc"
	"github.com/jhump/protoreflect/desc/protoprint"
	"google.golang.org/protobuf/reflect/protoregistry"

	// Imported for their registered file descriptors.
	_ "buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	_ "github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2/options"
	_ "google.golang.org/genproto/googleapis/api/annotations"
	_ "google.golang.org/genproto/googleapis/api/httpbody"
	_ "google.golang.org/genproto/googleapis/rpc/errdetails"
	_ "google.golang.org/genproto/googleapis/rpc/status"
)

// files are the roots to export; their non-well-known imports are exported too.
var files = []string{
	"google/api/annotations.proto",
	"google/api/http.proto",
	"google/api/field_behavior.proto",
	"google/api/httpbody.proto",
	"google/rpc/error_details.proto",
	"google/rpc/status.proto",
	"buf/validate/validate.proto",
	"protoc-gen-openapiv2/options/annotations.proto",
	"protoc-gen-openapiv2/options/openapiv2.proto",
}

func main() {
	out := flag.String("out", "third_party/proto", "directory to write the .proto files into")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "protosrc:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	printer := &protoprint.Printer{Compact: true, SortElements: false}
	seen := map[string]bool{}
	var export func(path string) error
	export = func(path string) error {
		if seen[path] || isWellKnown(path) {
			return nil
		}
		seen[path] = true
		fd, err := protoregistry.GlobalFiles.FindFileByPath(path)
		if err != nil {
			return fmt.Errorf("find %s: %w", path, err)
		}
		imports := fd.Imports()
		for i := 0; i < imports.Len(); i++ {
			if err := export(imports.Get(i).Path()); err != nil {
				return err
			}
		}
		d, err := desc.WrapFile(fd)
		if err != nil {
			return fmt.Errorf("wrap %s: %w", path, err)
		}
		dst := filepath.Join(out, path)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		f, err := os.Create(dst)
		if err != nil {
			return err
		}
		if err := printer.PrintProtoFile(d, f); err != nil {
			f.Close()
			return fmt.Errorf("print %s: %w", path, err)
		}
		return f.Close()
	}
	for _, p := range files {
		if err := export(p); err != nil {
			return err
		}
	}
	return nil
}

// isWellKnown reports whether path is one of google/protobuf/*.proto, which
// buf ships itself.
func isWellKnown(path string) bool {
	return filepath.Dir(path) == "google/protobuf"
}
