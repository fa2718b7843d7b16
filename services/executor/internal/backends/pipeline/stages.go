package pipeline

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The stand-in stage programs. They read and transform real files as the
// toolchain would, so the flow around them is real, and fail with a clear
// reason on bad input; production points each stage at the real
// toolchain instead (docs/api/pipeline.md, "Stage programs").

// stageFunc runs one stand-in stage in dir, writing its log to log.
type stageFunc func(dir string, log io.Writer) error

var stages = map[string]stageFunc{"onnx": runONNX, "bie": runBIE, "nef": runNEF}

// RefImagesDir is the work directory's folder of reference images.
const RefImagesDir = "ref_images"

// progress prints a progress line the agent reports.
func progress(log io.Writer, p int, msg string) {
	fmt.Fprintf(log, "::progress::%d %s\n", p, msg)
}

// singleInput finds the one input file of an ONNX work directory: its name
// and extension are not assumed; ref_images/ and the stage's own files do
// not count.
func singleInput(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var files []string
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), "out.") || strings.HasSuffix(e.Name(), ".log") {
			continue
		}
		files = append(files, e.Name())
	}
	if len(files) != 1 {
		return "", fmt.Errorf("the work directory must hold exactly one input file besides %s/, found %d", RefImagesDir, len(files))
	}
	return files[0], nil
}

func runONNX(dir string, log io.Writer) error {
	name, err := singleInput(dir)
	if err != nil {
		return err
	}
	progress(log, 20, "reading "+name)
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	m, fs, err := parseModel(b)
	if err != nil {
		return fmt.Errorf("%s is not an ONNX model: %w", name, err)
	}
	fmt.Fprintf(log, "model %s: ir_version %d, producer %q, %d opset imports, graph %q with %d nodes, inputs %v, outputs %v\n",
		name, m.IRVersion, m.Producer, m.Opsets, m.Graph, m.Nodes, m.Inputs, m.Outputs)
	progress(log, 70, "normalising")
	out := normalise(fs)
	if err := os.WriteFile(filepath.Join(dir, "out.onnx"), out, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(log, "wrote out.onnx: %d bytes (from %d)\n", len(out), len(b))
	return nil
}

// BIEMagic starts every out.bie the stand-in writes.
const BIEMagic = "TMBIE1\n"

// bieHeader describes what an out.bie combines.
type bieHeader struct {
	ModelSHA256 string   `json:"model_sha256"`
	ModelBytes  int      `json:"model_bytes"`
	Graph       string   `json:"graph"`
	Nodes       int      `json:"nodes"`
	Quant       []string `json:"quant_entries"`
	RefImages   []string `json:"ref_images"`
}

// runBIE combines out.onnx with quant.zip (read as a zip archive: every
// entry is read and checked against its CRC) and ref_images/ into out.bie:
// the magic, the header's length and JSON, then the model.
func runBIE(dir string, log io.Writer) error {
	model, err := os.ReadFile(filepath.Join(dir, "out.onnx"))
	if err != nil {
		return fmt.Errorf("out.onnx: %w", err)
	}
	m, _, err := parseModel(model)
	if err != nil {
		return fmt.Errorf("out.onnx is not an ONNX model: %w", err)
	}
	progress(log, 20, "reading quant.zip")
	zr, err := zip.OpenReader(filepath.Join(dir, "quant.zip"))
	if err != nil {
		return fmt.Errorf("quant.zip is not a zip archive: %w", err)
	}
	defer zr.Close()
	h := bieHeader{ModelBytes: len(model), Graph: m.Graph, Nodes: m.Nodes, Quant: []string{}, RefImages: []string{}}
	sum := sha256.Sum256(model)
	h.ModelSHA256 = hex.EncodeToString(sum[:])
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			return fmt.Errorf("quant.zip: %s: %w", f.Name, err)
		}
		_, err = io.Copy(io.Discard, rc) // the CRC is checked at EOF
		rc.Close()
		if err != nil {
			return fmt.Errorf("quant.zip: %s: %w", f.Name, err)
		}
		h.Quant = append(h.Quant, f.Name)
	}
	if refs, err := os.ReadDir(filepath.Join(dir, RefImagesDir)); err == nil {
		for _, r := range refs {
			if !r.IsDir() {
				h.RefImages = append(h.RefImages, r.Name())
			}
		}
	}
	sort.Strings(h.RefImages)
	fmt.Fprintf(log, "quant.zip: %d entries; %d reference images; model %s (%d bytes)\n", len(h.Quant), len(h.RefImages),
		h.ModelSHA256[:12], len(model))
	progress(log, 70, "writing out.bie")
	meta, _ := json.Marshal(h)
	var out bytes.Buffer
	out.WriteString(BIEMagic)
	_ = binary.Write(&out, binary.BigEndian, uint32(len(meta)))
	out.Write(meta)
	out.Write(model)
	return os.WriteFile(filepath.Join(dir, "out.bie"), out.Bytes(), 0o644)
}

// NEFManifest is manifest.json inside an out.nef.
type NEFManifest struct {
	Format string            `json:"format"`
	Files  map[string]string `json:"sha256"`
}

// runNEF packages out.bie as out.nef: a zip holding model.bie and
// manifest.json with the SHA-256 of every file.
func runNEF(dir string, log io.Writer) error {
	bie, err := os.ReadFile(filepath.Join(dir, "out.bie"))
	if err != nil {
		return fmt.Errorf("out.bie: %w", err)
	}
	if !bytes.HasPrefix(bie, []byte(BIEMagic)) || len(bie) < len(BIEMagic)+4 {
		return errors.New("out.bie is not a BIE file (its magic is missing)")
	}
	metaLen := binary.BigEndian.Uint32(bie[len(BIEMagic):])
	if int(metaLen) > len(bie)-len(BIEMagic)-4 || !json.Valid(bie[len(BIEMagic)+4:len(BIEMagic)+4+int(metaLen)]) {
		return errors.New("out.bie is damaged: its header does not fit")
	}
	progress(log, 40, "packaging out.nef")
	sum := sha256.Sum256(bie)
	manifest, _ := json.MarshalIndent(NEFManifest{Format: "taskmesh-nef/1", Files: map[string]string{"model.bie": hex.EncodeToString(sum[:])}}, "", "  ")
	var out bytes.Buffer
	zw := zip.NewWriter(&out)
	for _, f := range []struct {
		name string
		data []byte
	}{{"manifest.json", manifest}, {"model.bie", bie}} {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: f.name, Method: zip.Deflate})
		if err != nil {
			return err
		}
		if _, err := w.Write(f.data); err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	fmt.Fprintf(log, "out.nef: model.bie %s (%d bytes) and manifest.json\n", hex.EncodeToString(sum[:])[:12], len(bie))
	return os.WriteFile(filepath.Join(dir, "out.nef"), out.Bytes(), 0o644)
}
