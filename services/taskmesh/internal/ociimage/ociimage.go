// Package ociimage builds the Taskmesh container image without a
// container engine: the static taskmesh binary, a non-root user and the
// CA certificates, as OCI image layers written with go-containerregistry.
//
// Build writes the image two ways:
//
//   - an OCI image layout directory (index.json, oci-layout, blobs/) that
//     `skopeo copy oci:DIR:TAG docker://…` and `crane push DIR …` push;
//   - a tarball in the `docker save` format that `docker load -i` loads
//     (and `crane push FILE …`, `skopeo copy docker-archive:FILE …`).
//
// The image runs as uid/gid 65532 ("taskmesh"), has /data (owned by that
// user, the working directory and the place for an agent's --data-dir)
// and /tmp, and CA certificates at /etc/ssl/certs/ca-certificates.crt
// (SSL_CERT_FILE) for S3, OTLP and Kafka TLS. Layers carry a fixed
// modification time, so the same binary gives the same digests.
// docs/operations.md#the-image tells how to build and push it.
package ociimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Repository is the image's name; the Kubernetes manifests run it.
const Repository = "ghcr.io/taskmesh/taskmesh"

// Paths and the user inside the image.
const (
	BinaryPath = "/usr/local/bin/taskmesh"
	// ShimPath is the executor's shim, beside the binary where
	// the agent looks for it (docs/decisions/0075-small-shim-binary.md).
	ShimPath = "/usr/local/bin/taskmesh-shim"
	// StagePath is the pipeline's stage worker, beside the binary where
	// the scheduler looks for it
	// (docs/decisions/0091-small-stage-worker-binary.md).
	StagePath = "/usr/local/bin/taskmesh-stage"
	CAPath    = "/etc/ssl/certs/ca-certificates.crt"
	DataDir   = "/data"
	UID       = 65532
	UserName  = "taskmesh"
)

// Options say what goes into the image and where it is written.
type Options struct {
	// Binary is the taskmesh binary, built static (CGO_ENABLED=0).
	Binary string
	// Shim, if set, is the taskmesh-shim binary, built static; without it
	// the image's agents start each task's shim from the taskmesh binary.
	Shim string
	// Stage, if set, is the taskmesh-stage binary, built static; without
	// it the image's stage tasks run the taskmesh binary.
	Stage string
	// CACerts is the CA bundle (the build machine's
	// /etc/ssl/certs/ca-certificates.crt by default).
	CACerts string
	// Version labels the image (org.opencontainers.image.version).
	Version string
	// Tags are the image's references, e.g. ghcr.io/taskmesh/taskmesh:1.2.0
	// (at least one).
	Tags []string
	// Arch is the GOARCH the binary was built for (amd64 if empty).
	Arch string
	// LayoutDir, if set, receives the OCI image layout (replaced).
	LayoutDir string
	// Tarball, if set, receives the `docker save` tarball.
	Tarball string
	// Created is the image's creation time and the layers' file times
	// (the Unix epoch if zero: reproducible).
	Created time.Time
}

// Build assembles the image and writes it where opts say; it returns the
// image for callers that inspect it.
func Build(opts Options) (v1.Image, error) {
	if opts.CACerts == "" {
		opts.CACerts = CAPath
	}
	if opts.Arch == "" {
		opts.Arch = "amd64"
	}
	if len(opts.Tags) == 0 {
		return nil, errors.New("ociimage: at least one tag is needed")
	}
	tags := make([]name.Tag, len(opts.Tags))
	for i, t := range opts.Tags {
		tag, err := name.NewTag(t, name.StrictValidation)
		if err != nil {
			return nil, fmt.Errorf("ociimage: tag %q: %w", t, err)
		}
		tags[i] = tag
	}
	img, err := assemble(opts)
	if err != nil {
		return nil, err
	}
	if opts.LayoutDir != "" {
		if err := writeLayout(opts.LayoutDir, img, tags); err != nil {
			return nil, err
		}
	}
	if opts.Tarball != "" {
		refs := make(map[name.Tag]v1.Image, len(tags))
		for _, t := range tags {
			refs[t] = img
		}
		if err := tarball.MultiWriteToFile(opts.Tarball, refs); err != nil {
			return nil, fmt.Errorf("ociimage: write tarball: %w", err)
		}
	}
	return img, nil
}

// assemble builds the base layer (user, directories, certificates), the
// binary's layer and the config.
func assemble(opts Options) (v1.Image, error) {
	certs, err := os.ReadFile(opts.CACerts)
	if err != nil {
		return nil, fmt.Errorf("ociimage: CA certificates: %w", err)
	}
	bin, err := os.ReadFile(opts.Binary)
	if err != nil {
		return nil, fmt.Errorf("ociimage: binary: %w", err)
	}
	at := opts.Created.UTC()
	if opts.Created.IsZero() {
		at = time.Unix(0, 0).UTC()
	}
	base, err := layer(at, baseFiles(certs))
	if err != nil {
		return nil, err
	}
	bins := []file{{path: BinaryPath, mode: 0o755, data: bin}}
	for _, sib := range []struct{ name, from, to string }{{"shim", opts.Shim, ShimPath}, {"stage", opts.Stage, StagePath}} {
		if sib.from == "" {
			continue
		}
		data, err := os.ReadFile(sib.from)
		if err != nil {
			return nil, fmt.Errorf("ociimage: %s: %w", sib.name, err)
		}
		bins = append(bins, file{path: sib.to, mode: 0o755, data: data})
	}
	binLayer, err := layer(at, bins)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.AppendLayers(img, base, binLayer)
	if err != nil {
		return nil, fmt.Errorf("ociimage: layers: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("ociimage: config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: at}
	cf.OS, cf.Architecture = "linux", opts.Arch
	cf.Config = v1.Config{
		Entrypoint: []string{BinaryPath},
		Cmd:        []string{"--help"},
		User:       fmt.Sprintf("%d:%d", UID, UID),
		WorkingDir: DataDir,
		Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=" + CAPath,
			"HOME=" + DataDir},
		// The gateway's REST and gRPC ports, the internal gRPC port and the
		// metrics port the manifests use.
		ExposedPorts: map[string]struct{}{"8080/tcp": {}, "9090/tcp": {}, "9091/tcp": {}, "9464/tcp": {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "taskmesh",
			"org.opencontainers.image.description": "Taskmesh: a control plane for GPU workloads",
			"org.opencontainers.image.version":     opts.Version,
			"org.opencontainers.image.source":      "https://github.com/taskmesh/taskmesh",
		},
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("ociimage: config: %w", err)
	}
	return img, nil
}

// file is one entry of a layer: a directory when data is nil and dir set.
type file struct {
	path     string
	mode     int64
	data     []byte
	dir      bool
	uid, gid int
}

// baseFiles are the base layer: the user and group, its directories and
// the CA bundle.
func baseFiles(certs []byte) []file {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:%s:/sbin/nologin\n", UserName, UID, UID, UserName, DataDir)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", UserName, UID)
	return []file{
		{path: "/etc", mode: 0o755, dir: true},
		{path: "/etc/passwd", mode: 0o644, data: []byte(passwd)},
		{path: "/etc/group", mode: 0o644, data: []byte(group)},
		{path: "/etc/ssl", mode: 0o755, dir: true},
		{path: "/etc/ssl/certs", mode: 0o755, dir: true},
		{path: CAPath, mode: 0o644, data: certs},
		{path: "/tmp", mode: 0o1777, dir: true},
		{path: DataDir, mode: 0o750, dir: true, uid: UID, gid: UID},
		{path: "/usr", mode: 0o755, dir: true},
		{path: "/usr/local", mode: 0o755, dir: true},
		{path: "/usr/local/bin", mode: 0o755, dir: true},
	}
}

// layer is files as a gzip-compressed OCI layer.
func layer(at time.Time, files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.path[1:], Mode: f.mode, ModTime: at, Uid: f.uid, Gid: f.gid, Format: tar.FormatPAX}
		if f.dir {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("ociimage: layer: %w", err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, fmt.Errorf("ociimage: layer: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("ociimage: layer: %w", err)
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// writeLayout writes img into a fresh OCI layout at dir, once per tag
// (the index names each with org.opencontainers.image.ref.name, which is
// what `skopeo copy oci:DIR:TAG` selects by).
func writeLayout(dir string, img v1.Image, tags []name.Tag) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("ociimage: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("ociimage: %w", err)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("ociimage: layout: %w", err)
	}
	for _, t := range tags {
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": t.TagStr(),
			"io.containerd.image.name":          t.Name(),
		})); err != nil {
			return fmt.Errorf("ociimage: layout: %w", err)
		}
	}
	return nil
}
