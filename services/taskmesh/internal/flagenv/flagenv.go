// Package flagenv gives command-line flags environment-variable fallbacks
// (TASKMESH_<FLAG>), so every service can be configured the twelve-factor
// way in containers and with flags at a terminal. A flag given on the
// command line wins over the environment, which wins over the default.
package flagenv

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// Apply sets every flag of fs not given on the command line from its
// environment variable TASKMESH_<NAME> (dashes become underscores).
func Apply(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed {
			return
		}
		name := "TASKMESH_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %w", name, v, e)
			}
		}
	})
	return err
}

// Secret returns the value of a secret given directly, or read from a file
// (the *-file flag form keeps secrets out of process listings).
func Secret(value, file string) (string, error) {
	if file == "" {
		return value, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
