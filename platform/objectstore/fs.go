package objectstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// FSConfig configures FS.
type FSConfig struct {
	Root        string           // directory holding the objects (created 0700 if missing)
	BaseURL     string           // public URL prefix the Handler is mounted at, e.g. "http://127.0.0.1:8080/objects"
	Secret      []byte           // HMAC key for URL signatures; at least 32 bytes
	MaxPutBytes int64            // largest accepted PUT (default 10 GiB)
	Now         func() time.Time // injected clock; nil = time.Now
}

// DefaultMaxPutBytes is FSConfig.MaxPutBytes when it is zero.
const DefaultMaxPutBytes int64 = 10 << 30

// MinSecretLen is the shortest FSConfig.Secret accepted: a shorter HMAC key
// would be the weakest link of the URL signatures.
const MinSecretLen = 32

// String describes the configuration without the secret.
func (c FSConfig) String() string {
	return fmt.Sprintf("FSConfig{Root:%q BaseURL:%q Secret:%s MaxPutBytes:%d}",
		c.Root, c.BaseURL, redactBytes(c.Secret), c.MaxPutBytes)
}

// GoString keeps %#v from printing the secret too.
func (c FSConfig) GoString() string { return "objectstore." + c.String() }

// LogValue makes slog print the configuration without the secret, whatever
// the handler (a JSON handler would otherwise marshal the fields).
func (c FSConfig) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("root", c.Root),
		slog.String("base_url", c.BaseURL),
		slog.String("secret", redactBytes(c.Secret)),
		slog.Int64("max_put_bytes", c.MaxPutBytes),
	)
}

func redactBytes(b []byte) string {
	if len(b) == 0 {
		return "[unset]"
	}
	return "[REDACTED]"
}

// FS is a Store in a local directory, for development and single-node
// setups. Layout under Root:
//
//	objects/<key>   one file per object: a fixed-size metadata header, then the content
//	tmp/            uploads in progress, renamed into objects/ when complete
//
// Keeping the metadata (size, SHA-256, content type, modification time) in
// the same file as the content makes a Put a single rename, so a reader
// never pairs new content with old metadata. Keys live under objects/ so no
// key can collide with tmp/. Every path is resolved through os.Root, which
// refuses ".." and symlinks that lead outside Root.
//
// A key cannot be both an object and a "directory" of other keys (e.g. "a"
// and "a/b"): Put reports the conflict. S3 has no such limit.
type FS struct {
	root *os.Root
	// link is root.Link; tests replace it to refuse links.
	link     func(oldname, newname string) error
	baseURL  string // without trailing "/"
	basePath string // path of baseURL, without trailing "/"
	secret   []byte
	maxPut   int64
	now      func() time.Time
}

var _ Store = (*FS)(nil)

const (
	objectsDir = "objects"
	tmpDir     = "tmp"

	// headerSize is the fixed space reserved at the start of each object
	// file for its metadata. Fixed so the content can be streamed in first
	// and the header (which needs the final SHA-256) written afterwards.
	headerSize  = 1024
	headerMagic = "taskmesh-objectstore v1\n"

	// staleTempAge is how old a file in tmp/ must be for NewFS to delete it
	// as debris of a crashed upload. Generous so a second process sharing
	// Root (tests, a restart during a long upload) does not lose live ones.
	staleTempAge = 24 * time.Hour
)

// errKeyConflict is wrapped by FS.Put when the key collides with an existing
// object used as a directory, or with a directory of other keys.
var errKeyConflict = errors.New("objectstore: key conflicts with an existing object")

// NewFS opens (creating if needed) a filesystem store.
func NewFS(cfg FSConfig) (*FS, error) {
	if cfg.Root == "" {
		return nil, errors.New("objectstore: FSConfig.Root is empty")
	}
	if len(cfg.Secret) < MinSecretLen {
		return nil, fmt.Errorf("objectstore: FSConfig.Secret has %d bytes, need at least %d", len(cfg.Secret), MinSecretLen)
	}
	base, err := url.Parse(cfg.BaseURL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" ||
		base.RawQuery != "" || base.Fragment != "" || base.User != nil {
		return nil, fmt.Errorf("objectstore: FSConfig.BaseURL %q must be an absolute http(s) URL without query, fragment or user info", cfg.BaseURL)
	}
	if cfg.MaxPutBytes < 0 {
		return nil, fmt.Errorf("objectstore: FSConfig.MaxPutBytes %d is negative", cfg.MaxPutBytes)
	}
	maxPut := cfg.MaxPutBytes
	if maxPut == 0 {
		maxPut = DefaultMaxPutBytes
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	if err := os.MkdirAll(cfg.Root, 0o700); err != nil {
		return nil, fmt.Errorf("objectstore: creating root: %w", err)
	}
	root, err := os.OpenRoot(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("objectstore: opening root: %w", err)
	}
	for _, d := range []string{objectsDir, tmpDir} {
		if err := root.MkdirAll(d, 0o700); err != nil {
			root.Close()
			return nil, fmt.Errorf("objectstore: creating %s under root: %w", d, err)
		}
	}
	f := &FS{
		root:     root,
		link:     root.Link,
		baseURL:  strings.TrimSuffix(base.String(), "/"),
		basePath: strings.TrimSuffix(base.Path, "/"), // decoded, like Request.URL.Path
		secret:   bytes.Clone(cfg.Secret),
		maxPut:   maxPut,
		now:      now,
	}
	f.removeStaleTemps()
	return f, nil
}

// removeStaleTemps deletes leftovers of uploads and copies that died with
// the process. Best effort: a failure here only costs disk space.
func (f *FS) removeStaleTemps() {
	d, err := f.root.Open(tmpDir)
	if err != nil {
		return
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		at := info.ModTime()
		if strings.HasPrefix(e.Name(), copyTempPrefix) {
			at = changedAt(info)
		}
		if time.Since(at) > staleTempAge {
			_ = f.root.Remove(filepath.Join(tmpDir, e.Name()))
		}
	}
}

// objectName is the os.Root-relative name of key's file. key must be valid.
func objectName(key string) string { return filepath.FromSlash(objectsDir + "/" + key) }

// header is the JSON metadata at the start of every object file.
type header struct {
	Size        int64  `json:"size"`
	SHA256      string `json:"sha256"`
	ContentType string `json:"content_type"`
	ModTimeNS   int64  `json:"mod_time_ns"`
}

func (h header) info(key string) Info {
	return Info{Key: key, Size: h.Size, ContentType: h.ContentType, SHA256: h.SHA256, ModTime: time.Unix(0, h.ModTimeNS)}
}

func (h header) marshal() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString(headerMagic)
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(h); err != nil {
		return nil, err
	}
	if buf.Len() > headerSize {
		// Unreachable with validated content types; guards the format.
		return nil, fmt.Errorf("objectstore: object header of %d bytes exceeds %d", buf.Len(), headerSize)
	}
	buf.Write(bytes.Repeat([]byte{' '}, headerSize-buf.Len()))
	return buf.Bytes(), nil
}

// readHeader reads and checks the header of an open object file. A file
// whose length disagrees with its header is reported as corrupt rather than
// served short or long.
func readHeader(file *os.File) (header, error) {
	var h header
	buf := make([]byte, headerSize)
	if _, err := file.ReadAt(buf, 0); err != nil {
		return h, fmt.Errorf("objectstore: reading object header: %w", err)
	}
	rest, ok := bytes.CutPrefix(buf, []byte(headerMagic))
	if !ok {
		return h, errors.New("objectstore: object file has no valid header")
	}
	if err := json.NewDecoder(bytes.NewReader(rest)).Decode(&h); err != nil {
		return h, fmt.Errorf("objectstore: decoding object header: %w", err)
	}
	st, err := file.Stat()
	if err != nil {
		return h, fmt.Errorf("objectstore: stat object file: %w", err)
	}
	if st.Size() != headerSize+h.Size {
		return h, fmt.Errorf("objectstore: object file is %d bytes, header says %d+%d", st.Size(), headerSize, h.Size)
	}
	return h, nil
}

// openObject opens key's file and reads its header. Missing keys, keys
// whose file is a directory (a prefix of other keys) and keys below a
// regular file all map to ErrNotFound.
func (f *FS) openObject(key string) (*os.File, header, error) {
	file, err := f.root.Open(objectName(key))
	if err != nil {
		if isNotExist(err) {
			return nil, header{}, fmt.Errorf("%w: %s", ErrNotFound, key)
		}
		return nil, header{}, fmt.Errorf("objectstore: open %s: %w", key, err)
	}
	st, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, header{}, fmt.Errorf("objectstore: stat %s: %w", key, err)
	}
	if !st.Mode().IsRegular() {
		file.Close()
		return nil, header{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	h, err := readHeader(file)
	if err != nil {
		file.Close()
		return nil, header{}, fmt.Errorf("%s: %w", key, err)
	}
	return file, h, nil
}

func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// objectReader is the content of an object file after its header. It also
// implements io.Seeker and io.ReaderAt, which http.ServeContent uses for
// Range requests.
type objectReader struct {
	*io.SectionReader
	file *os.File
}

func (r *objectReader) Close() error { return r.file.Close() }

// Open implements Store. The returned reader keeps reading the version that
// was current at Open even if a Put replaces the object meanwhile.
func (f *FS) Open(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, Info{}, err
	}
	if err := ValidateKey(key); err != nil {
		return nil, Info{}, err
	}
	file, h, err := f.openObject(key)
	if err != nil {
		return nil, Info{}, err
	}
	return &objectReader{SectionReader: io.NewSectionReader(file, headerSize, h.Size), file: file}, h.info(key), nil
}

// Stat implements Store.
func (f *FS) Stat(ctx context.Context, key string) (Info, error) {
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	if err := ValidateKey(key); err != nil {
		return Info{}, err
	}
	file, h, err := f.openObject(key)
	if err != nil {
		return Info{}, err
	}
	file.Close()
	return h.info(key), nil
}

// Delete implements Store. Directories left empty are kept; Put copes with
// them.
func (f *FS) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidateKey(key); err != nil {
		return err
	}
	name := objectName(key)
	st, err := f.root.Lstat(name)
	if err != nil {
		if isNotExist(err) {
			return nil
		}
		return fmt.Errorf("objectstore: delete %s: %w", key, err)
	}
	if st.IsDir() {
		return nil // a prefix of other keys, not an object
	}
	// Remove never follows a symlink; it removes the link itself.
	if err := f.root.Remove(name); err != nil && !isNotExist(err) {
		return fmt.Errorf("objectstore: delete %s: %w", key, err)
	}
	return nil
}

// ctxReader fails reads once ctx is done, so a cancelled Put stops between
// reads even when the body never errors by itself.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Put implements Store: the body is streamed into a temporary file in
// Root/tmp (same filesystem, so the final rename is atomic), hashed on the
// way, synced, and renamed over the key's file. On any error, including a
// body longer or shorter than size, the temporary file is removed and the
// previous object, if any, is untouched.
func (f *FS) Put(ctx context.Context, key string, body io.Reader, size int64, contentType string) (Info, error) {
	return f.put(ctx, key, body, size, contentType, "")
}

// errDigestMismatch: a body whose sha256 is not the one required.
var errDigestMismatch = errors.New("objectstore: body does not match the expected sha256")

// put is Put that, when wantSHA is set, installs the body only if its
// sha256 is wantSHA (errDigestMismatch otherwise, the object unchanged).
func (f *FS) put(ctx context.Context, key string, body io.Reader, size int64, contentType, wantSHA string) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, err
	}
	ct, err := normalizeContentType(contentType)
	if err != nil {
		return Info{}, err
	}
	if size < -1 {
		return Info{}, fmt.Errorf("objectstore: put %s: invalid size %d", key, size)
	}
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}

	tmp, tmpName, err := f.createTemp()
	if err != nil {
		return Info{}, err
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			_ = f.root.Remove(tmpName)
		}
	}()

	var src io.Reader = ctxReader{ctx: ctx, r: body}
	if size >= 0 {
		src = newExactReader(src, size)
	}
	hash := sha256.New()
	buf := make([]byte, 256<<10)
	n, err := io.CopyBuffer(io.MultiWriter(io.NewOffsetWriter(tmp, headerSize), hash), src, buf)
	if err != nil {
		return Info{}, fmt.Errorf("objectstore: put %s: %w", key, err)
	}
	h := header{Size: n, SHA256: hex.EncodeToString(hash.Sum(nil)), ContentType: ct, ModTimeNS: f.now().UnixNano()}
	if wantSHA != "" && h.SHA256 != wantSHA {
		return Info{}, fmt.Errorf("objectstore: put %s: %w", key, errDigestMismatch)
	}
	hdr, err := h.marshal()
	if err != nil {
		return Info{}, err
	}
	if _, err := tmp.WriteAt(hdr, 0); err != nil {
		return Info{}, fmt.Errorf("objectstore: put %s: %w", key, err)
	}
	// Sync before rename: otherwise a crash can leave the new name pointing
	// at an empty or partial file on filesystems with delayed allocation.
	if err := tmp.Sync(); err != nil {
		return Info{}, fmt.Errorf("objectstore: put %s: %w", key, err)
	}
	if err := tmp.Close(); err != nil {
		return Info{}, fmt.Errorf("objectstore: put %s: %w", key, err)
	}
	if err := f.install(tmpName, key); err != nil {
		return Info{}, err
	}
	committed = true
	return h.info(key), nil
}

// Copy implements Store. The copy is a second hard link to from's file:
// an object's file is never changed once installed (Put renames a new
// file over the name), so both keys read the same bytes until either is
// replaced or deleted, and nothing is written or synced but a directory
// entry. Where no link can be made (the file system's limit of links to
// one file, a root spanning file systems), the bytes are copied as Put
// stores them.
func (f *FS) Copy(ctx context.Context, from, to string) (Info, error) {
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	if err := ValidateKey(from); err != nil {
		return Info{}, err
	}
	if err := ValidateKey(to); err != nil {
		return Info{}, err
	}
	if from == to {
		// Renaming a link over another link to the same file does nothing
		// and leaves both names, so the temporary link would stay.
		return f.Stat(ctx, from)
	}
	tmpName := tempName(copyTempPrefix)
	err := f.link(objectName(from), tmpName)
	switch {
	case err == nil:
		return f.installLink(tmpName, from, to)
	case isNotExist(err):
		return Info{}, fmt.Errorf("%w: %s", ErrNotFound, from)
	}
	r, info, err := f.Open(ctx, from) // a directory (a prefix of keys) is ErrNotFound here
	if err != nil {
		return Info{}, err
	}
	defer r.Close()
	return f.Put(ctx, to, r, info.Size, info.ContentType)
}

// installLink installs the temporary link tmpName to from's file as to.
// The header is read from the link itself: from may have been replaced
// since, and the link holds the version it was made to.
func (f *FS) installLink(tmpName, from, to string) (Info, error) {
	installed := false
	defer func() {
		if !installed {
			_ = f.root.Remove(tmpName)
		}
	}()
	file, err := f.root.Open(tmpName)
	if err != nil {
		return Info{}, fmt.Errorf("objectstore: copy %s: %w", from, err)
	}
	h, err := readHeader(file)
	file.Close()
	if err != nil {
		return Info{}, fmt.Errorf("%s: %w", from, err)
	}
	if err := f.install(tmpName, to); err != nil {
		return Info{}, err
	}
	installed = true
	return h.info(to), nil
}

// copyTempPrefix starts the names of Copy's temporary links in tmp/.
const copyTempPrefix = "copy-"

// tempName is a fresh name in tmp/: 128 random bits after prefix.
func tempName(prefix string) string {
	var rnd [16]byte
	_, _ = rand.Read(rnd[:]) // never fails (crypto/rand panics instead)
	return filepath.Join(tmpDir, prefix+hex.EncodeToString(rnd[:]))
}

// createTemp creates a new, exclusive file in tmp/. os.Root has no
// CreateTemp, so the name is 128 random bits.
func (f *FS) createTemp() (*os.File, string, error) {
	name := tempName("put-")
	file, err := f.root.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, "", fmt.Errorf("objectstore: creating temporary file: %w", err)
	}
	return file, name, nil
}

// install renames the finished temporary file to key's name. It retries a
// little because the layout can change underneath it: an empty directory
// left by deleted sub-keys may occupy the name (removed, then retried), and
// a concurrent install may remove a directory this one just created.
func (f *FS) install(tmpName, key string) error {
	name := objectName(key)
	var err error
	for range 3 {
		if dir := path.Dir(objectsDir + "/" + key); dir != objectsDir {
			if err = f.root.MkdirAll(filepath.FromSlash(dir), 0o700); err != nil {
				if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, fs.ErrExist) {
					return fmt.Errorf("%w: %s: a prefix of it is an object", errKeyConflict, key)
				}
				return fmt.Errorf("objectstore: put %s: %w", key, err)
			}
		}
		err = f.root.Rename(tmpName, name)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.ENOTEMPTY):
			// The name is a directory; removable only if empty.
			if rmErr := f.root.Remove(name); rmErr != nil && !isNotExist(rmErr) {
				return fmt.Errorf("%w: %s: other keys are stored under it", errKeyConflict, key)
			}
		case errors.Is(err, fs.ErrNotExist):
			// The parent directory vanished; recreate it and retry.
		default:
			return fmt.Errorf("objectstore: put %s: %w", key, err)
		}
	}
	return fmt.Errorf("objectstore: put %s: %w", key, err)
}
