package ctl

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	videov1 "github.com/taskmesh/taskmesh/gen/taskmesh/video/v1"
)

// maxImageFileBytes bounds a first frame read from a file; the server
// refuses more than 10 MB anyway, so a larger file is refused here.
const maxImageFileBytes = 10 << 20

// videoCommand groups the video generation API's commands.
func (a *app) videoCommand() *cobra.Command {
	video := &cobra.Command{
		Use:   "video",
		Short: "Submit, inspect and cancel or delete video generations",
		Args:  cobra.ArbitraryArgs,
		RunE:  groupRunE,
	}
	video.AddCommand(a.videoSubmitCommand(), a.videoGetCommand(), a.videoDeleteCommand())
	return video
}

func (a *app) videoSubmitCommand() *cobra.Command {
	var (
		req                       videov1.CreateVideoGenerationRequest
		input                     videov1.VideoGenerationInput
		params                    videov1.VideoGenerationParameters
		duration                  int32
		seed                      int64
		noPromptExtend, watermark bool
		image                     string
	)
	cmd := &cobra.Command{
		Use:   "submit --model MODEL --prompt TEXT [--image URL|@FILE]",
		Short: "Submit a video generation and print its task id",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			if f.Changed("duration") {
				params.Duration = &duration
			}
			if f.Changed("seed") {
				params.Seed = &seed
			}
			if noPromptExtend {
				off := false
				params.PromptExtend = &off
			}
			if f.Changed("watermark") {
				params.Watermark = &watermark
			}
			if image != "" {
				var err error
				if input.Image, err = imageArg(image); err != nil {
					return usageErrorf(cmd, "--image: %v", err)
				}
			}
			req.Input, req.Parameters = &input, &params
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.video.CreateVideoGeneration(ctx, &req)
				return resp, func(w io.Writer) error {
					_, err := fmt.Fprintf(w, "%s %s\n", resp.GetOutput().GetTaskId(), resp.GetOutput().GetTaskStatus())
					return err
				}, err
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Model, "model", "", "model: wan2.2-t2v or wan2.2-i2v out of the box")
	f.StringVar(&req.Type, "type", "", "text_to_video or image_to_video (default: the model's)")
	f.StringVar(&input.Prompt, "prompt", "", "what the video shows (at most 800 characters are used)")
	f.StringVar(&input.NegativePrompt, "negative-prompt", "", "what it should not show")
	f.StringVar(&image, "image", "", "first frame for image_to_video: an http(s) URL, or @FILE to send a local image")
	f.StringVar(&params.Resolution, "resolution", "", "480P, 720P or 1080P (default 480P)")
	f.Int32Var(&duration, "duration", 5, "seconds (wan2.2: 5 only)")
	f.Int64Var(&seed, "seed", 0, "seed, 0 to 2147483647 (default: random)")
	f.BoolVar(&noPromptExtend, "no-prompt-extend", false, "use the prompt as given, without rewriting it")
	f.BoolVar(&watermark, "watermark", false, "add the \"AI生成\" mark")
	return cmd
}

// imageArg turns @FILE into a data: URI (the MIME type sniffed from the
// content; the server checks the real format anyway) and passes URLs on.
func imageArg(v string) (string, error) {
	path, ok := strings.CutPrefix(v, "@")
	if !ok {
		return v, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxImageFileBytes+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxImageFileBytes {
		return "", fmt.Errorf("%s is larger than 10 MB", path)
	}
	return "data:" + http.DetectContentType(b) + ";base64," + base64.StdEncoding.EncodeToString(b), nil
}

func (a *app) videoGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show a video generation: status, progress and, once SUCCEEDED, the video's link",
		Args:  idArgsOf("video task"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.video.GetVideoGeneration(ctx, &videov1.GetVideoGenerationRequest{TaskId: args[0]})
				return resp, func(w io.Writer) error { return writeVideo(w, resp.GetData()) }, err
			})
		},
	}
}

// writeVideo prints a generation as "field: value" lines.
func writeVideo(w io.Writer, d *videov1.VideoGenerationTask) error {
	rows := [][2]string{{"task_id", d.GetTaskId()}, {"status", d.GetTaskStatus()}}
	if d.Model != nil {
		in := d.GetTaskInput()
		rows = append(rows, [][2]string{{"model", d.GetModel()}, {"type", d.GetTaskType()},
			{"progress", fmt.Sprintf("%d%%", d.GetTaskProgress())}, {"submitted", d.GetSubmitTime()},
			{"prompt", in.GetPrompt()}, {"resolution", in.GetResolution()}, {"duration", fmt.Sprintf("%ds", in.GetDuration())},
			{"seed", fmt.Sprint(in.GetSeed())}}...)
		if in.ActualPrompt != nil {
			rows = append(rows, [2]string{"actual_prompt", in.GetActualPrompt()})
		}
		if u := in.GetVideoUrl(); u != nil {
			rows = append(rows, [2]string{"video_url", u.GetValue()})
		}
	}
	if d.Code != nil {
		rows = append(rows, [2]string{"error", d.GetCode() + ": " + d.GetMessage()})
	}
	for _, r := range rows {
		if _, err := fmt.Fprintf(w, "%-14s %s\n", r[0]+":", r[1]); err != nil {
			return err
		}
	}
	return nil
}

func (a *app) videoDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete ID",
		Short: "Cancel a QUEUED generation, or delete a SUCCEEDED or FAILED one",
		Args:  idArgsOf("video task"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.taskCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.video.DeleteVideoGeneration(ctx, &videov1.DeleteVideoGenerationRequest{TaskId: args[0]})
				return resp, func(w io.Writer) error {
					_, err := fmt.Fprintf(w, "%s %s\n", resp.GetOutput().GetTaskId(), resp.GetOutput().GetTaskStatus())
					return err
				}, err
			})
		},
	}
}
