package agent

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// spareRunDirs keeps the run directories of settled attempts, emptied, for
// later attempts to take with a rename instead of creating their own
// (docs/executor.md, "Run directories are reused"). Creating a directory
// and removing it again is the costliest file-system work of a short task
// on ext4 (the inode's allocation and release, the block group search);
// a rename moves an existing one.
//
// Invariant: a directory in free holds nothing but an empty tmp
// directory, both mode 0700, and take checks it again before handing it
// out, so a file that appeared after it was emptied (a late write of the
// attempt's shim) never reaches the next attempt.
type spareRunDirs struct {
	root string // <data dir>/spare-runs, on the file system of runs/
	max  int

	mu      sync.Mutex
	free    []string // paths under root, the newest last
	pending int      // directories being emptied, counted against max
	next    int      // the next name under root
}

// runTmpDir is the one entry a run directory has when prepare creates it
// (TMPDIR of a task that is not sandboxed), and the one a spare keeps.
const runTmpDir = "tmp"

// newSpareRunDirs starts an empty pool at root, removing whatever an
// earlier run of the agent left there: spares are never in use, and a
// fresh start is cheaper to reason about than checking each.
func newSpareRunDirs(root string, max int) (*spareRunDirs, error) {
	if err := os.RemoveAll(root); err != nil {
		return nil, err
	}
	if err := os.Mkdir(root, 0o700); err != nil {
		return nil, err
	}
	return &spareRunDirs{root: root, max: max}, nil
}

// take moves a spare to runDir, which then holds an empty tmp, and says
// whether it did. It does nothing when runDir exists (a re-spawned
// attempt keeps what its directory holds; a rename would also replace an
// empty directory there) or when no spare is left. A spare that does not
// hold exactly an empty tmp is removed, and the caller creates runDir.
func (s *spareRunDirs) take(runDir string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	n := len(s.free)
	if n == 0 {
		s.mu.Unlock()
		return false
	}
	spare := s.free[n-1]
	s.free = s.free[:n-1]
	s.mu.Unlock()
	if _, err := os.Lstat(runDir); !errors.Is(err, fs.ErrNotExist) {
		s.put(spare)
		return false
	}
	if !holdsOnlyEmptyTmp(spare) {
		_ = os.RemoveAll(spare)
		return false
	}
	if err := os.Rename(spare, runDir); err != nil {
		_ = os.RemoveAll(spare)
		return false
	}
	return true
}

// put returns an unused spare to the pool.
func (s *spareRunDirs) put(spare string) {
	s.mu.Lock()
	s.free = append(s.free, spare)
	s.mu.Unlock()
}

// recycle empties runDir and moves it into the pool, and says whether it
// did; when it did not (the pool is full, or emptying failed part way),
// the caller removes runDir as before.
func (s *spareRunDirs) recycle(runDir string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	if len(s.free)+s.pending >= s.max {
		s.mu.Unlock()
		return false
	}
	s.pending++
	s.next++
	spare := filepath.Join(s.root, strconv.Itoa(s.next))
	s.mu.Unlock()
	ok := emptyRunDir(runDir) && os.Rename(runDir, spare) == nil
	s.mu.Lock()
	s.pending--
	if ok {
		s.free = append(s.free, spare)
	}
	s.mu.Unlock()
	return ok
}

// emptyRunDir leaves dir as prepare creates it: mode 0700, holding only
// an empty tmp of mode 0700. The task ran as the agent's user and may
// have changed anything in it: tmp may be a symbolic link, a file, or a
// directory of another mode, and each is replaced by a new tmp.
// Symbolic links are removed, never followed.
func emptyRunDir(dir string) bool {
	names, perm, err := dirState(dir)
	if err != nil {
		return false
	}
	for _, name := range names {
		if name == runTmpDir {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return false
		}
	}
	tmp := filepath.Join(dir, runTmpDir)
	inside, tmpPerm, err := dirState(tmp)
	if err == nil && tmpPerm == 0o700 {
		for _, name := range inside {
			if err := os.RemoveAll(filepath.Join(tmp, name)); err != nil {
				return false
			}
		}
	} else if os.RemoveAll(tmp) != nil || os.Mkdir(tmp, 0o700) != nil {
		return false
	}
	return perm == 0o700 || os.Chmod(dir, 0o700) == nil
}

// holdsOnlyEmptyTmp says whether dir is a directory of mode 0700 holding
// nothing but an empty directory tmp of mode 0700.
func holdsOnlyEmptyTmp(dir string) bool {
	names, perm, err := dirState(dir)
	if err != nil || perm != 0o700 || !slices.Equal(names, []string{runTmpDir}) {
		return false
	}
	inside, perm, err := dirState(filepath.Join(dir, runTmpDir))
	return err == nil && perm == 0o700 && len(inside) == 0
}

// dirState lists the entries of directory dir and gives its permission
// bits. A symbolic link at dir is an error (O_NOFOLLOW), never followed:
// what a task left in its run directory is not trusted.
func dirState(dir string) ([]string, fs.FileMode, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	names, err := f.Readdirnames(-1)
	return names, fi.Mode().Perm(), err
}
