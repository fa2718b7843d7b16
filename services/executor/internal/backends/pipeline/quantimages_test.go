package pipeline

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var (
	pngBytes  = "\x89PNG\r\n\x1a\n rest of a png"
	jpegBytes = "\xff\xd8\xff\xe0 rest of a jpeg"
	bmpBytes  = "BM\x36\x00\x00\x00\x00\x00\x00\x00 rest of a bmp"
	webpBytes = "RIFF\x10\x00\x00\x00WEBPVP8 rest"
)

func refImages(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, RefImagesDir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// The images of quant.zip, in any folder, join the uploaded reference
// images; other entries, hidden files and folders do not, and a name
// already taken gets the entry's path.
func TestQuantImagesJoinTheReferenceImages(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "ref_images/01-cat.png", []byte(pngBytes))
	write(t, dir, "quant.zip", testZip(t, map[string]string{
		"ref_images/img0.png": pngBytes, "ref_images/img1.jpg": jpegBytes, "calib/a.bmp": bmpBytes, "b.webp": webpBytes,
		"other/01-cat.png": pngBytes, "calib/0001.npy": "data", "notes.txt": "BM but text", "__MACOSX/._img0.png": pngBytes,
		"../escape.png": pngBytes,
	}))
	n, err := extractQuantImages(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := refImages(t, dir)
	want := []string{"01-cat.png", "a.bmp", "b.webp", "escape.png", "img0.png", "img1.jpg", "other_01-cat.png"}
	if n != 6 || !slices.Equal(got, want) {
		t.Fatalf("%d images: %v, want %v", n, got, want)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, RefImagesDir, "img1.jpg")); string(b) != jpegBytes {
		t.Errorf("img1.jpg = %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "escape.png")); err == nil {
		t.Error("an entry was written outside ref_images/")
	}
	// The BIE stage then reads them all.
	write(t, dir, "out.onnx", testModel())
	if err := runBIE(dir, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	bie, _ := os.ReadFile(filepath.Join(dir, "out.bie"))
	if !strings.Contains(string(bie), `"ref_images":["01-cat.png","a.bmp","b.webp","escape.png","img0.png","img1.jpg","other_01-cat.png"]`) {
		t.Errorf("out.bie: %.400q", bie)
	}
}

// An image too large for a quantization set, or an archive that is not
// one, fails the stage with the reason.
func TestQuantImagesRefuseWhatIsTooLarge(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, RefImagesDir), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "quant.zip", testZip(t, map[string]string{"huge.png": pngBytes + strings.Repeat("x", maxQuantImageBytes)}))
	if _, err := extractQuantImages(dir); err == nil || !strings.Contains(err.Error(), "huge.png: an image larger than") {
		t.Errorf("err = %v", err)
	}
	write(t, dir, "quant.zip", []byte("PK\x03\x04 cut short"))
	if _, err := extractQuantImages(dir); err == nil || !strings.HasPrefix(err.Error(), "quant.zip is not a zip archive") {
		t.Errorf("err = %v", err)
	}
}

// The README's example inputs (deployments/examples/pipeline) go through
// the ONNX and BIE stages, the archive's two images with them.
func TestTheExampleInputsConvert(t *testing.T) {
	examples := filepath.Join("..", "..", "..", "..", "..", "deployments", "examples", "pipeline")
	dir := t.TempDir()
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(examples, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// As the stages' work directories hold them: the ONNX stage its one
	// input, the BIE stage out.onnx and quant.zip.
	write(t, dir, "model.onnx", read("model.onnx"))
	if err := os.MkdirAll(filepath.Join(dir, RefImagesDir), 0o755); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	if err := runONNX(dir, &log); err != nil {
		t.Fatalf("onnx: %v\n%s", err, log.String())
	}
	write(t, dir, "quant.zip", read("quant.zip"))
	if n, err := extractQuantImages(dir); err != nil || n != 2 {
		t.Fatalf("quant.zip images: %d, %v", n, err)
	}
	if err := runBIE(dir, &log); err != nil {
		t.Fatalf("bie: %v\n%s", err, log.String())
	}
	if err := runNEF(dir, &log); err != nil {
		t.Fatalf("nef: %v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "2 reference images") {
		t.Errorf("log: %s", log.String())
	}
}
