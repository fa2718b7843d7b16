package pg

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ErrNoBinaries is returned (possibly wrapped) when the PostgreSQL server
// binaries cannot be found. Its message tells how to install them.
var ErrNoBinaries = errors.New("PostgreSQL server binaries (initdb, postgres) not found: " +
	"install them with `apt-get install -y postgresql` (Debian/Ubuntu) or `brew install postgresql@15` (macOS), " +
	"or set TASKMESH_PG_BIN to their directory (`taskmesh dev` can instead use an existing server given in DATABASE_URL)")

// ErrUnreachableDataDir is returned (wrapped) by LocalServer.Start when the
// server user cannot reach the data directory (running as root with a 0700
// directory above it); the caller may choose another place.
var ErrUnreachableDataDir = errors.New("pg: data directory unreachable by the server user")

// FindBinDir finds the directory holding initdb and postgres: $TASKMESH_PG_BIN,
// then `pg_config --bindir`, then the highest /usr/lib/postgresql/*/bin
// (Debian and Ubuntu install there without putting the server on PATH), then
// the directory of initdb on PATH. When none has both it returns
// ErrNoBinaries. A TASKMESH_PG_BIN that lacks them is an error rather than
// skipped, since whoever set it expects it to be used.
func FindBinDir() (string, error) {
	if dir := os.Getenv("TASKMESH_PG_BIN"); dir != "" {
		if hasServerBinaries(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("%w (TASKMESH_PG_BIN=%s does not contain both)", ErrNoBinaries, dir)
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); hasServerBinaries(dir) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		return -compareVersions(filepath.Base(filepath.Dir(a)), filepath.Base(filepath.Dir(b)))
	})
	for _, dir := range dirs {
		if hasServerBinaries(dir) {
			return dir, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if dir := filepath.Dir(p); hasServerBinaries(dir) {
			return dir, nil
		}
	}
	return "", ErrNoBinaries
}

func hasServerBinaries(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

// compareVersions orders directory names such as "9.6", "15" and "16"
// numerically; non-numeric parts compare as 0.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x - y
		}
	}
	return 0
}
