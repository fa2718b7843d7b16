package main

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/flagenv"
)

// videoFlags configure the video generation API the scheduler serves.
type videoFlags struct {
	enabled                       bool
	rewriterURL, rewriterModel    string
	rewriterKeyFile               string
	rewriterTimeout, imageTimeout time.Duration
	allowPrivate                  bool
	timeZone                      string
}

func (v *videoFlags) add(f *pflag.FlagSet, withSwitch bool) {
	if withSwitch {
		f.BoolVar(&v.enabled, "video", true, "serve the video generation API (/v1/video/generations)")
	}
	f.StringVar(&v.rewriterURL, "video-rewriter-base-url", "", "OpenAI-compatible API root for prompt_extend, e.g. https://api.openai.com/v1 (empty: the rule-based rewriter)")
	f.StringVar(&v.rewriterModel, "video-rewriter-model", "", "chat model that rewrites prompts")
	f.StringVar(&v.rewriterKeyFile, "video-rewriter-api-key-file", "", "file holding the rewriter's API key")
	f.DurationVar(&v.rewriterTimeout, "video-rewriter-timeout", 20*time.Second, "give up rewriting after this long and use the rule-based rewriter")
	f.DurationVar(&v.imageTimeout, "video-image-timeout", 15*time.Second, "time limit for downloading a first frame")
	f.BoolVar(&v.allowPrivate, "video-allow-private-image-urls", false, "let first frames be downloaded from non-public addresses (development only)")
	f.StringVar(&v.timeZone, "video-time-zone", "", "time zone of the video API's wall-clock times, an IANA name such as UTC (default: UTC+8, as the API's document shows them)")
}

// config returns the scheduler's video configuration; nil when the API is
// switched off.
func (v *videoFlags) config() (*scheduler.VideoConfig, error) {
	if !v.enabled {
		return nil, nil
	}
	var loc *time.Location // the scheduler's default
	if v.timeZone != "" {
		var err error
		if loc, err = time.LoadLocation(v.timeZone); err != nil {
			return nil, fmt.Errorf("--video-time-zone: %w", err)
		}
	}
	key, err := flagenv.Secret("", v.rewriterKeyFile)
	if err != nil {
		return nil, fmt.Errorf("--video-rewriter-api-key-file: %w", err)
	}
	return &scheduler.VideoConfig{RewriterBaseURL: v.rewriterURL, RewriterModel: v.rewriterModel, RewriterAPIKey: key,
		RewriterTimeout: v.rewriterTimeout, ImageTimeout: v.imageTimeout, AllowPrivateImageURLs: v.allowPrivate, Location: loc}, nil
}
