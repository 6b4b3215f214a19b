package files

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Local is a Store over a directory of the local disk (or a mount). Every
// access goes through an os.Root, so neither ".." nor a symbolic link can
// reach a file outside the directory.
//
// A local file's identity is its size and modification time at listing,
// checked again when it is opened and when it has been read to its end;
// its SHA-256 is computed as it is read and recorded in File.SHA256.
type Local struct {
	root string
}

var _ Store = (*Local)(nil)

// NewLocal returns a Store rooted at dir, an absolute path. The directory
// is opened at each call, so it may be mounted after the store is built.
func NewLocal(dir string) (*Local, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("local store: %q is not an absolute path", dir)
	}
	return &Local{root: filepath.Clean(dir)}, nil
}

// URL returns file:// and the file's absolute path.
func (l *Local) URL(key string) string {
	return "file://" + strings.TrimSuffix(filepath.ToSlash(l.root), "/") + "/" + key
}

func (l *Local) String() string { return l.URL("") }

func (l *Local) open() (*os.Root, error) {
	r, err := os.OpenRoot(l.root)
	if err != nil {
		return nil, fmt.Errorf("local store %s: %w", l.URL(""), err)
	}
	return r, nil
}

// name turns a key or a prefix into a name os.Root accepts.
func name(key string) string {
	key = strings.TrimSuffix(key, "/")
	if key == "" {
		return "."
	}
	return filepath.FromSlash(key)
}

// List reads the directory prefix names. A directory that does not exist
// is an empty one, as an S3 prefix with no object is; a root that does not
// exist is an error (a mount that is missing is not an empty partition).
func (l *Local) List(_ context.Context, prefix string) (Dir, error) {
	r, err := l.open()
	if err != nil {
		return Dir{}, err
	}
	defer r.Close()
	d, err := r.Open(name(prefix))
	if errors.Is(err, fs.ErrNotExist) {
		return Dir{}, nil
	}
	if err != nil {
		return Dir{}, fmt.Errorf("list %s: %w", l.URL(prefix), err)
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return Dir{}, fmt.Errorf("list %s: %w", l.URL(prefix), err)
	}
	var out Dir
	for _, e := range entries {
		key := prefix + e.Name()
		switch {
		case e.IsDir():
			out.Prefixes = append(out.Prefixes, key+"/")
		case e.Type().IsRegular() || e.Type()&fs.ModeSymlink != 0:
			f, err := l.stat(r, key)
			if err != nil {
				return Dir{}, err
			}
			if f.Size >= 0 {
				out.Files = append(out.Files, f)
			}
		}
	}
	return out, nil
}

// stat follows a link that stays inside the root; a file that is not
// regular gets Size -1, for List to skip.
func (l *Local) stat(r *os.Root, key string) (File, error) {
	fi, err := r.Stat(name(key))
	if errors.Is(err, fs.ErrNotExist) {
		return File{}, fmt.Errorf("%s: %w", l.URL(key), ErrNotFound)
	}
	if err != nil {
		return File{}, fmt.Errorf("stat %s: %w", l.URL(key), err)
	}
	if !fi.Mode().IsRegular() {
		return File{Key: key, Size: -1}, nil
	}
	return File{Key: key, URL: l.URL(key), Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

// Stat returns the regular file at key.
func (l *Local) Stat(_ context.Context, key string) (File, error) {
	r, err := l.open()
	if err != nil {
		return File{}, err
	}
	defer r.Close()
	f, err := l.stat(r, key)
	if err == nil && f.Size < 0 {
		return File{}, fmt.Errorf("%s is not a regular file", l.URL(key))
	}
	return f, err
}

// Get reads a small file whole.
func (l *Local) Get(ctx context.Context, key string, limit int64) ([]byte, File, error) {
	f, err := l.Stat(ctx, key)
	if err != nil {
		return nil, File{}, err
	}
	if f.Size > limit {
		return nil, File{}, fmt.Errorf("%s: %d bytes, more than the %d a marker or manifest may have", f.URL, f.Size, limit)
	}
	rc, err := l.Open(ctx, &f)
	if err != nil {
		return nil, File{}, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, File{}, err
	}
	return b, f, nil
}

// openChecked opens f and checks it is still the file that was listed.
func (l *Local) openChecked(f *File) (*os.File, error) {
	r, err := l.open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	h, err := r.Open(name(f.Key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &ChangedError{URL: f.URL, Listed: f.identity(), Found: "no file"}
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", f.URL, err)
	}
	if err := l.check(h, f); err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

// check compares an open file's size and modification time with f's.
func (l *Local) check(h *os.File, f *File) error {
	fi, err := h.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", f.URL, err)
	}
	if fi.Size() != f.Size || !fi.ModTime().Equal(f.ModTime) {
		found := File{Size: fi.Size(), ModTime: fi.ModTime()}
		return &ChangedError{URL: f.URL, Listed: f.identity(), Found: found.identity()}
	}
	return nil
}

// Open streams f, hashing it; at its end it checks that the file kept its
// size and modification time, and sets f.SHA256.
func (l *Local) Open(_ context.Context, f *File) (io.ReadCloser, error) {
	h, err := l.openChecked(f)
	if err != nil {
		return nil, err
	}
	return &localReader{l: l, f: f, h: h, sum: sha256.New()}, nil
}

type localReader struct {
	l    *Local
	f    *File
	h    *os.File
	sum  hash.Hash
	n    int64
	done error
}

func (r *localReader) Read(p []byte) (int, error) {
	if r.done != nil {
		return 0, r.done
	}
	n, err := r.h.Read(p)
	r.sum.Write(p[:n])
	r.n += int64(n)
	if err == io.EOF {
		err = r.finish()
		r.done = err
	}
	return n, err
}

func (r *localReader) finish() error {
	if err := r.l.check(r.h, r.f); err != nil {
		return err
	}
	if r.n != r.f.Size {
		return &ChangedError{URL: r.f.URL, Listed: r.f.identity(), Found: fmt.Sprintf("%d bytes read", r.n)}
	}
	r.f.SHA256 = hex.EncodeToString(r.sum.Sum(nil))
	return io.EOF
}

func (r *localReader) Close() error { return r.h.Close() }

// OpenAt gives random access to f. Its Close checks the file kept its size
// and modification time, then hashes it (sequentially, from the page cache
// the reads just filled) into f.SHA256.
func (l *Local) OpenAt(_ context.Context, f *File) (ReaderAt, error) {
	h, err := l.openChecked(f)
	if err != nil {
		return nil, err
	}
	return &localReaderAt{l: l, f: f, h: h}, nil
}

type localReaderAt struct {
	l *Local
	f *File
	h *os.File
}

func (r *localReaderAt) ReadAt(p []byte, off int64) (int, error) { return r.h.ReadAt(p, off) }

func (r *localReaderAt) Close() error {
	defer r.h.Close()
	if err := r.l.check(r.h, r.f); err != nil {
		return err
	}
	sum := sha256.New()
	if _, err := io.Copy(sum, io.NewSectionReader(r.h, 0, r.f.Size)); err != nil {
		return fmt.Errorf("hash %s: %w", r.f.URL, err)
	}
	r.f.SHA256 = hex.EncodeToString(sum.Sum(nil))
	return nil
}
