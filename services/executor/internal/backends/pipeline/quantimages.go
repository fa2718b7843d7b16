package pipeline

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Bounds of the images taken out of quant.zip: as many and as large as a
// quantization set reasonably is, so that a hostile archive (a zip bomb,
// millions of entries) fails the stage instead of filling the disk.
const (
	maxQuantImages     = 10000
	maxQuantImageBytes = 32 << 20 // the size limit of an uploaded reference image
	maxQuantImageTotal = 4 << 30
)

// extractQuantImages puts the images inside quant.zip (JPEG, PNG, BMP or
// WEBP, judged by content, in any folder of the archive) into
// ref_images/, where the BIE stage reads its reference images
// (docs/api/pipeline.md, "Stage workers"): the quantization set a user
// uploads as one archive is the images the toolchain calibrates with.
// Each keeps its base name; one that another image already has gets the
// archive's folder path in its name. Other entries stay in the archive
// only. It returns how many images it wrote.
func extractQuantImages(dir string) (int, error) {
	zr, err := zip.OpenReader(filepath.Join(dir, "quant.zip"))
	if err != nil {
		return 0, fmt.Errorf("quant.zip is not a zip archive: %w", err)
	}
	defer zr.Close()
	refs := filepath.Join(dir, RefImagesDir)
	taken := map[string]bool{}
	if entries, err := os.ReadDir(refs); err == nil {
		for _, e := range entries {
			taken[e.Name()] = true
		}
	}
	n, total := 0, int64(0)
	for _, f := range zr.File {
		if f.FileInfo().IsDir() || !f.Mode().IsRegular() {
			continue
		}
		name := path.Base(f.Name)
		if name == "" || name == "." || name == ".." || strings.HasPrefix(name, ".") {
			continue // folders, hidden files and resource forks (__MACOSX/._x.png)
		}
		data, err := readEntry(f)
		if err != nil {
			return n, fmt.Errorf("quant.zip: %s: %w", f.Name, err)
		}
		if !isImage(data) {
			continue
		}
		if n++; n > maxQuantImages {
			return n, fmt.Errorf("quant.zip holds more than %d images", maxQuantImages)
		}
		if total += int64(len(data)); total > maxQuantImageTotal {
			return n, fmt.Errorf("quant.zip's images come to more than %d bytes", int64(maxQuantImageTotal))
		}
		if taken[name] {
			name = strings.NewReplacer("/", "_", "\\", "_").Replace(path.Clean(f.Name))
			for i := 2; taken[name]; i++ {
				name = fmt.Sprintf("%d-%s", i, path.Base(f.Name))
			}
		}
		taken[name] = true
		if err := os.WriteFile(filepath.Join(refs, name), data, 0o644); err != nil {
			return n, err
		}
	}
	return n, nil
}

// readEntry reads one archive entry, at most maxQuantImageBytes of it
// (larger entries are no image of a quantization set; reading them whole
// would let a small archive fill the memory).
func readEntry(f *zip.File) ([]byte, error) {
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var head [12]byte
	k, err := io.ReadFull(rc, head[:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if !isImage(head[:k]) {
		// Not an image: read on only to check the entry's CRC, as the
		// BIE stage reads every entry.
		_, err := io.Copy(io.Discard, rc)
		return head[:k], err
	}
	data, err := io.ReadAll(io.LimitReader(rc, maxQuantImageBytes+1-int64(k)))
	if err != nil {
		return nil, err
	}
	data = append(head[:k:k], data...)
	if len(data) > maxQuantImageBytes {
		return nil, fmt.Errorf("an image larger than %d bytes", maxQuantImageBytes)
	}
	return data, nil
}

// isImage reports whether b starts like a JPEG, PNG, BMP or WEBP file.
func isImage(b []byte) bool {
	switch {
	case bytes.HasPrefix(b, []byte{0xFF, 0xD8, 0xFF}):
		return true
	case bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		return true
	case len(b) >= 10 && bytes.HasPrefix(b, []byte("BM")) && bytes.Equal(b[6:10], []byte{0, 0, 0, 0}):
		return true // BITMAPFILEHEADER: its two reserved words are zero
	case len(b) >= 12 && bytes.Equal(b[:4], []byte("RIFF")) && bytes.Equal(b[8:12], []byte("WEBP")):
		return true
	}
	return false
}
