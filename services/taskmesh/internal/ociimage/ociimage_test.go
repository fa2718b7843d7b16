package ociimage_test

import (
	"archive/tar"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/taskmesh/taskmesh/platform/buildtest"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/ociimage"
)

// The image `make image` builds, read back from the OCI layout: its
// config names the binary as entrypoint and a non-root user, its layers
// hold the user, the CA bundle and a static binary, which runs and says
// the version it was built with; the docker-load tarball holds the same
// image under the same tags.
func TestImageReadsBackAndItsEntrypointRuns(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "taskmesh")
	const version = "1.2.3-test"
	buildtest.Binary(t, "github.com/taskmesh/taskmesh/services/taskmesh/cmd/taskmesh", bin, "-s -w -X main.version="+version)
	siblings := map[string]string{}
	for _, sib := range []string{"taskmesh-shim", "taskmesh-stage"} {
		siblings[sib] = filepath.Join(dir, sib)
		buildtest.Binary(t, "github.com/taskmesh/taskmesh/services/executor/cmd/"+sib, siblings[sib], "-s -w")
	}
	tags := []string{ociimage.Repository + ":" + version, ociimage.Repository + ":latest"}
	layoutDir, tarPath := filepath.Join(dir, "layout"), filepath.Join(dir, "taskmesh.tar")
	built, err := ociimage.Build(ociimage.Options{Binary: bin, Shim: siblings["taskmesh-shim"], Stage: siblings["taskmesh-stage"], Version: version, Tags: tags, Arch: runtime.GOARCH,
		LayoutDir: layoutDir, Tarball: tarPath})
	if err != nil {
		t.Fatal(err)
	}
	want, err := built.Digest()
	if err != nil {
		t.Fatal(err)
	}
	wantConfig, err := built.ConfigName()
	if err != nil {
		t.Fatal(err)
	}

	img := fromLayout(t, layoutDir, "latest")
	if d, _ := img.Digest(); d != want {
		t.Fatalf("layout image %s, built %s", d, want)
	}
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s", mt)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if len(c.Entrypoint) != 1 || c.Entrypoint[0] != ociimage.BinaryPath || c.User != "65532:65532" ||
		cf.OS != "linux" || cf.Architecture != runtime.GOARCH || c.Labels["org.opencontainers.image.version"] != version {
		t.Fatalf("config: entrypoint %v user %q os %s/%s labels %v", c.Entrypoint, c.User, cf.OS, cf.Architecture, c.Labels)
	}

	files := extract(t, img)
	if !strings.Contains(string(files["etc/passwd"].data), "taskmesh:x:65532:65532:") {
		t.Errorf("/etc/passwd = %q", files["etc/passwd"].data)
	}
	host, _ := os.ReadFile(ociimage.CAPath)
	if ca := files[ociimage.CAPath[1:]]; len(ca.data) == 0 || string(ca.data) != string(host) {
		t.Errorf("CA bundle in the image: %d bytes, host's %d", len(ca.data), len(host))
	}
	if d := files[ociimage.DataDir[1:]]; d.uid != ociimage.UID {
		t.Errorf("%s owned by %d", ociimage.DataDir, d.uid)
	}
	entry := files[c.Entrypoint[0][1:]]
	if entry.mode&0o111 == 0 || len(entry.data) == 0 {
		t.Fatalf("entrypoint in the image: mode %o, %d bytes", entry.mode, len(entry.data))
	}
	extracted := filepath.Join(dir, "entrypoint")
	if err := os.WriteFile(extracted, entry.data, 0o755); err != nil {
		t.Fatal(err)
	}
	requireStatic(t, extracted)
	out, err := exec.Command(extracted, "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "taskmesh "+version+" ") {
		t.Fatalf("entrypoint --version = %q, %v", out, err)
	}
	// The shim sits beside the binary, where the agent looks for it.
	shim := files[ociimage.ShimPath[1:]]
	if shim.mode&0o111 == 0 || len(shim.data) == 0 || filepath.Dir(ociimage.ShimPath) != filepath.Dir(c.Entrypoint[0]) {
		t.Fatalf("shim in the image: mode %o, %d bytes, at %s", shim.mode, len(shim.data), ociimage.ShimPath)
	}
	extractedShim := filepath.Join(dir, "shim")
	if err := os.WriteFile(extractedShim, shim.data, 0o755); err != nil {
		t.Fatal(err)
	}
	requireStatic(t, extractedShim)
	if out, err := exec.Command(extractedShim).CombinedOutput(); !strings.Contains(string(out), "usage: shim serve") {
		t.Fatalf("shim without arguments = %q, %v; want its usage", out, err)
	}
	// So does the stage worker, where the scheduler looks for it.
	stage := files[ociimage.StagePath[1:]]
	if stage.mode&0o111 == 0 || len(stage.data) == 0 || filepath.Dir(ociimage.StagePath) != filepath.Dir(c.Entrypoint[0]) {
		t.Fatalf("stage worker in the image: mode %o, %d bytes, at %s", stage.mode, len(stage.data), ociimage.StagePath)
	}
	extractedStage := filepath.Join(dir, "stage")
	if err := os.WriteFile(extractedStage, stage.data, 0o755); err != nil {
		t.Fatal(err)
	}
	requireStatic(t, extractedStage)
	if out, err := exec.Command(extractedStage).CombinedOutput(); !strings.Contains(string(out), "usage: pipeline-stage") {
		t.Fatalf("stage worker without arguments = %q, %v; want its usage", out, err)
	}

	for _, tg := range tags {
		tag, err := name.NewTag(tg)
		if err != nil {
			t.Fatal(err)
		}
		fromTar, err := tarball.ImageFromPath(tarPath, &tag)
		if err != nil {
			t.Fatalf("tarball %s: %v", tg, err)
		}
		// docker save's format has no manifest of its own: the config
		// (which names every layer's digest) is what identifies the image.
		if c, err := fromTar.ConfigName(); err != nil || c != wantConfig {
			t.Errorf("tarball image %s has config %s %v, want %s", tg, c, err, wantConfig)
		}
	}
}

// fromLayout finds the image tagged tag in an OCI layout.
func fromLayout(t *testing.T, dir, tag string) v1.Image {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range m.Manifests {
		if d.Annotations["org.opencontainers.image.ref.name"] == tag {
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			return img
		}
	}
	t.Fatalf("no image tagged %s in %v", tag, m.Manifests)
	return nil
}

type entry struct {
	data []byte
	mode int64
	uid  int
}

// extract reads the image's flattened file system.
func extract(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	out := map[string]entry{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = entry{data: b, mode: h.Mode, uid: h.Uid}
	}
}

// requireStatic fails for a dynamically linked binary: the image has no
// C library to load it with.
func requireStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("the binary is dynamically linked (it has an ELF interpreter)")
		}
	}
}
