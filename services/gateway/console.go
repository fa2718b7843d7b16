package gateway

import "net/http"

// consoleHandler is the web console served at /ui, nil when it is off.
func consoleHandler(cfg Config) http.Handler {
	if cfg.NoConsole {
		return nil
	}
	return nil
}
