// Command taskmesh-image builds the Taskmesh container image from a
// static taskmesh binary without a container engine (package ociimage):
// `make image` runs it.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/taskmesh/taskmesh/services/taskmesh/internal/ociimage"
)

func main() {
	var (
		opts ociimage.Options
		tags string
	)
	flag.StringVar(&opts.Binary, "binary", "bin/linux/taskmesh", "the static taskmesh binary")
	flag.StringVar(&opts.Shim, "shim", "", "the static taskmesh-shim binary (empty: none; agents then re-execute taskmesh per task)")
	flag.StringVar(&opts.Stage, "stage", "", "the static taskmesh-stage binary (empty: none; stage tasks then run taskmesh)")
	flag.StringVar(&opts.CACerts, "ca-certs", ociimage.CAPath, "CA bundle to include")
	flag.StringVar(&opts.Version, "version", "dev", "the image's version label")
	flag.StringVar(&tags, "tags", ociimage.Repository+":latest", "comma-separated image references")
	flag.StringVar(&opts.Arch, "arch", "amd64", "the binary's GOARCH")
	flag.StringVar(&opts.LayoutDir, "layout", "bin/image/taskmesh", "OCI image layout directory to write")
	flag.StringVar(&opts.Tarball, "tarball", "bin/image/taskmesh.tar", "docker-load tarball to write (empty: none)")
	flag.Parse()
	opts.Tags = strings.Split(tags, ",")
	img, err := ociimage.Build(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "taskmesh-image:", err)
		os.Exit(1)
	}
	digest, err := img.Digest()
	if err != nil {
		fmt.Fprintln(os.Stderr, "taskmesh-image:", err)
		os.Exit(1)
	}
	fmt.Printf("image %s (%s)\n  OCI layout: %s\n  tarball:    %s\n", tags, digest, opts.LayoutDir, opts.Tarball)
}
