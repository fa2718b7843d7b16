package pipeline

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/objectstore"
)

// pb encodes protobuf fields for test models.
type pb []byte

func (b pb) varint(num int, v uint64) pb {
	b = appendUvarint(b, uint64(num<<3))
	return appendUvarint(b, v)
}

func (b pb) bytes(num int, v []byte) pb {
	b = appendUvarint(b, uint64(num<<3|2))
	b = appendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// testModel is a small ONNX model: a Relu graph with one input and one
// output, with a doc_string and its fields out of order.
func testModel() []byte {
	node := pb{}.bytes(1, []byte("x")).bytes(2, []byte("y")).bytes(4, []byte("Relu"))
	graph := pb{}.bytes(1, node).bytes(2, []byte("tiny")).bytes(11, pb{}.bytes(1, []byte("x"))).bytes(12, pb{}.bytes(1, []byte("y")))
	return pb{}.bytes(7, graph).varint(1, 8).bytes(2, []byte("pytorch")).bytes(6, []byte("a doc string")).
		bytes(8, pb{}.varint(2, 17))
}

func testZip(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	// In name order: the stage lists entries in archive order, and a map's
	// order changes from run to run.
	for _, name := range slices.Sorted(maps.Keys(files)) {
		body := files[name]
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(body))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func write(t *testing.T, dir, name string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestTheONNXStageParsesAndNormalises(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "resnet-export.bin", testModel())
	if err := os.Mkdir(filepath.Join(dir, RefImagesDir), 0o755); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	if err := runONNX(dir, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	out, _ := os.ReadFile(filepath.Join(dir, "out.onnx"))
	m, fs, err := parseModel(out)
	if err != nil {
		t.Fatal(err)
	}
	if m.IRVersion != 8 || m.Producer != "pytorch" || m.Graph != "tiny" || m.Nodes != 1 || m.Opsets != 1 ||
		m.Inputs[0] != "x" || m.Outputs[0] != "y" {
		t.Errorf("out.onnx reads as %+v", m)
	}
	for i, f := range fs {
		if f.num == 6 || (i > 0 && f.num < fs[i-1].num) {
			t.Errorf("out.onnx is not normalised: field %d at %d", f.num, i)
		}
	}
	if !strings.Contains(log.String(), `graph "tiny" with 1 nodes`) || !strings.Contains(log.String(), "::progress::") {
		t.Errorf("log: %s", log.String())
	}
}

func TestTheONNXStageRefusesWhatIsNotAModel(t *testing.T) {
	cases := map[string]struct {
		data []byte
		want string
	}{
		"text":        {[]byte("hello world, not a model"), "model.onnx is not an ONNX model: field 13 at byte 2 has wire type 4, which protobuf does not have"},
		"truncated":   {testModel()[:20], "model.onnx is not an ONNX model: field 7 at byte 0: it ends in the middle of a field"},
		"no graph":    {pb{}.varint(1, 8), "model.onnx is not an ONNX model: it has no graph"},
		"no version":  {pb{}.bytes(7, pb{}.bytes(2, []byte("g"))), "model.onnx is not an ONNX model: it has no ir_version"},
		"wrong types": {pb{}.bytes(1, []byte("8")), "ModelProto field 1 has wire type 2, not 0"},
		"bad wire":    {[]byte{0x0e}, "wire type 6"},
	}
	for name, c := range cases {
		dir := t.TempDir()
		write(t, dir, "model.onnx", c.data)
		err := runONNX(dir, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", name, err, c.want)
		}
	}
	dir := t.TempDir()
	write(t, dir, "a.onnx", testModel())
	write(t, dir, "b.onnx", testModel())
	if err := runONNX(dir, io.Discard); err == nil || !strings.Contains(err.Error(), "exactly one input file") {
		t.Errorf("two inputs: %v", err)
	}
}

func TestTheBIEAndNEFStagesCombineAndPackage(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "model.onnx", testModel())
	if err := runONNX(dir, io.Discard); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "quant.zip", testZip(t, map[string]string{"calib/0001.npy": "data", "config.json": "{}"}))
	write(t, dir, "ref_images/01-cat.png", []byte("png"))
	var log bytes.Buffer
	if err := runBIE(dir, &log); err != nil {
		t.Fatal(err)
	}
	bie, _ := os.ReadFile(filepath.Join(dir, "out.bie"))
	if !bytes.HasPrefix(bie, []byte(BIEMagic)) || !strings.Contains(string(bie), `"quant_entries":["calib/0001.npy","config.json"]`) ||
		!strings.Contains(string(bie), `"ref_images":["01-cat.png"]`) {
		t.Errorf("out.bie: %q", bie)
	}
	if err := runNEF(dir, &log); err != nil {
		t.Fatal(err)
	}
	nef, _ := os.ReadFile(filepath.Join(dir, "out.nef"))
	checkNEF(t, nef, bie)
}

// checkNEF reads an out.nef: model.bie is bie and the manifest holds its
// checksum.
func checkNEF(t *testing.T, nef, bie []byte) {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(nef), int64(len(nef)))
	if err != nil {
		t.Fatalf("out.nef is not a zip: %v", err)
	}
	files := map[string][]byte{}
	for _, f := range zr.File {
		rc, _ := f.Open()
		files[f.Name], _ = io.ReadAll(rc)
		rc.Close()
	}
	var m NEFManifest
	if err := json.Unmarshal(files["manifest.json"], &m); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(bie)
	if !bytes.Equal(files["model.bie"], bie) || m.Files["model.bie"] != hex.EncodeToString(sum[:]) || m.Format != "taskmesh-nef/1" {
		t.Errorf("out.nef holds %v, manifest %+v", len(files["model.bie"]), m)
	}
}

func TestTheBIEStageRefusesABadArchive(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "out.onnx", testModel())
	write(t, dir, "quant.zip", []byte("PK\x03\x04 but nothing more"))
	if err := runBIE(dir, io.Discard); err == nil || !strings.HasPrefix(err.Error(), "quant.zip is not a zip archive") {
		t.Errorf("err = %v", err)
	}
	write(t, dir, "out.bie", []byte("not a bie"))
	if err := runNEF(dir, io.Discard); err == nil || !strings.Contains(err.Error(), "out.bie is not a BIE file") {
		t.Errorf("nef: %v", err)
	}
}

// store serves a filesystem object store over HTTP, as the gateway does.
func store(t *testing.T) *objectstore.FS {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fs, err := objectstore.NewFS(objectstore.FSConfig{Root: t.TempDir(), BaseURL: "http://" + ln.Addr().String() + "/objects",
		Secret: []byte(strings.Repeat("k", objectstore.MinSecretLen))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(fs.Handler())
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return fs
}

// workerArgs are the arguments the pipeline gives a stage task.
func workerArgs(t *testing.T, fs *objectstore.FS, stage, dir string, inputs map[string]string, program ...string) []string {
	t.Helper()
	ctx := context.Background()
	args := []string{"--job", "j1", "--stage", stage, "--workdir", dir}
	for name, key := range inputs {
		u, err := fs.PresignGet(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, "--input", name+"="+u)
	}
	out, _, _ := fs.PresignPutUpTo(ctx, "jobs/j1/output/"+stage, time.Minute, 1<<20, "application/octet-stream")
	logURL, _, _ := fs.PresignPutUpTo(ctx, "jobs/j1/logs/"+stage+".log", time.Minute, 1<<20, "text/plain; charset=utf-8")
	args = append(args, "--output", out, "--log", logURL)
	if len(program) > 0 {
		p, _ := json.Marshal(program)
		args = append(args, "--program", string(p))
	}
	return args
}

func read(t *testing.T, fs *objectstore.FS, key string) []byte {
	t.Helper()
	r, _, err := fs.Open(context.Background(), key)
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	defer r.Close()
	b, _ := io.ReadAll(r)
	return b
}

func TestAWorkerRunsEachStageThroughSignedLinks(t *testing.T) {
	fs := store(t)
	ctx := context.Background()
	put := func(key string, data []byte) {
		if _, err := fs.Put(ctx, key, bytes.NewReader(data), int64(len(data)), ""); err != nil {
			t.Fatal(err)
		}
	}
	put("in/model.onnx", testModel())
	put("in/quant.zip", testZip(t, map[string]string{"a.npy": "1"}))
	put("in/cat.png", []byte("png"))
	dir := t.TempDir()
	write(t, dir, "leftover.txt", []byte("from a previous attempt"))
	if err := runWorker(workerArgs(t, fs, "onnx", dir, map[string]string{"model.onnx": "in/model.onnx", "ref_images/01-cat.png": "in/cat.png"})); err != nil {
		t.Fatal(err)
	}
	onnx := read(t, fs, "jobs/j1/output/onnx")
	if _, _, err := parseModel(onnx); err != nil {
		t.Fatalf("uploaded out.onnx: %v", err)
	}
	if log := read(t, fs, "jobs/j1/logs/onnx.log"); !strings.Contains(string(log), `graph "tiny"`) || !strings.HasSuffix(string(log), "done\n") {
		t.Errorf("onnx log: %s", log)
	}
	put("work/out.onnx", onnx)
	if err := runWorker(workerArgs(t, fs, "bie", t.TempDir(), map[string]string{"out.onnx": "work/out.onnx", "quant.zip": "in/quant.zip"})); err != nil {
		t.Fatal(err)
	}
	bie := read(t, fs, "jobs/j1/output/bie")
	put("work/out.bie", bie)
	if err := runWorker(workerArgs(t, fs, "nef", t.TempDir(), map[string]string{"out.bie": "work/out.bie"})); err != nil {
		t.Fatal(err)
	}
	checkNEF(t, read(t, fs, "jobs/j1/output/nef"), bie)
}

func TestAFailingWorkerKeepsItsLogAndSaysWhy(t *testing.T) {
	fs := store(t)
	if _, err := fs.Put(context.Background(), "in/model.onnx", strings.NewReader("GIF89a"), 6, ""); err != nil {
		t.Fatal(err)
	}
	err := runWorker(workerArgs(t, fs, "onnx", t.TempDir(), map[string]string{"model.onnx": "in/model.onnx"}))
	if err == nil || !strings.HasPrefix(err.Error(), "model.onnx is not an ONNX model") {
		t.Fatalf("err = %v", err)
	}
	if log := string(read(t, fs, "jobs/j1/logs/onnx.log")); !strings.Contains(log, "FAILED: model.onnx is not an ONNX model") {
		t.Errorf("log: %s", log)
	}
	if _, err := fs.Stat(context.Background(), "jobs/j1/output/onnx"); err == nil {
		t.Error("a failed stage uploaded an output")
	}
	// A link that does not work fails the stage (no retry on a 403).
	args := workerArgs(t, fs, "onnx", t.TempDir(), map[string]string{"model.onnx": "in/model.onnx"})
	for i, a := range args {
		if strings.HasPrefix(a, "model.onnx=") {
			args[i] = strings.Replace(a, "X-Signature=", "X-Signature=x", 1)
		}
	}
	if err := runWorker(args); err == nil || !strings.Contains(err.Error(), "downloading model.onnx: GET answered 403") {
		t.Errorf("bad link: %v", err)
	}
}

func TestAConfiguredProgramRunsInTheWorkDirectory(t *testing.T) {
	fs := store(t)
	if _, err := fs.Put(context.Background(), "in/m", bytes.NewReader(testModel()), int64(len(testModel())), ""); err != nil {
		t.Fatal(err)
	}
	// The toolchain stand-in: a shell that copies its input and says so.
	err := runWorker(workerArgs(t, fs, "onnx", t.TempDir(), map[string]string{"model.onnx": "in/m"},
		"/bin/sh", "-c", `cd "$1" && test -d ref_images && cp model.onnx out.onnx && echo "converted in $1"`, "sh", "{workdir}"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(read(t, fs, "jobs/j1/output/onnx"), testModel()) || !strings.Contains(string(read(t, fs, "jobs/j1/logs/onnx.log")), "converted in /") {
		t.Error("the program's output or log is missing")
	}
	err = runWorker(workerArgs(t, fs, "onnx", t.TempDir(), map[string]string{"model.onnx": "in/m"},
		"/bin/sh", "-c", `echo "toolchain: unsupported operator Foo" >&2; exit 3`))
	if err == nil || err.Error() != "sh: toolchain: unsupported operator Foo" {
		t.Errorf("err = %v", err)
	}
}

func TestMainSaysWhyOnItsLastLine(t *testing.T) {
	if code := Main([]string{"convert"}); code != 1 {
		t.Errorf("unknown command: exit %d", code)
	}
	if code := Main([]string{"run", "--stage", "xyz", "--output", "u", "--log", "u"}); code != 1 {
		t.Errorf("bad stage: exit %d", code)
	}
	dir := t.TempDir()
	if code := Main([]string{"noop", "--workdir", dir, "out.bie"}); code != 0 {
		t.Fatalf("noop: exit %d", code)
	}
	if _, err := os.Stat(filepath.Join(dir, "out.bie")); err != nil {
		t.Error(err)
	}
	// A no-op program's empty output is uploaded like any other.
	fs := store(t)
	if err := put(context.Background(), mustPresign(t, fs, "empty"), "application/octet-stream", nil); err != nil {
		t.Fatalf("an empty upload: %v", err)
	}
	if got := read(t, fs, "empty"); len(got) != 0 {
		t.Errorf("stored %d bytes", len(got))
	}
}

func mustPresign(t *testing.T, fs *objectstore.FS, key string) string {
	t.Helper()
	u, _, err := fs.PresignPutUpTo(context.Background(), key, time.Minute, 10, "application/octet-stream")
	if err != nil {
		t.Fatal(err)
	}
	return u
}
