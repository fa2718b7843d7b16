package gateway

import (
	"net/http"

	"github.com/taskmesh/taskmesh/services/gateway/internal/console"
)

// consoleHandler is the web console served at /ui (docs/console.md), nil
// when it is off.
func consoleHandler(cfg Config) http.Handler {
	if cfg.NoConsole {
		return nil
	}
	return console.Handler()
}
