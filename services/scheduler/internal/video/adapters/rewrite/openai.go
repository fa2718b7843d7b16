package rewrite

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// Rewriter rewrites a prompt.
type Rewriter interface {
	Rewrite(ctx context.Context, prompt string) (string, error)
}

// OpenAIConfig configures OpenAI.
type OpenAIConfig struct {
	// BaseURL is the API root, e.g. https://api.openai.com/v1; the client
	// posts to BaseURL + "/chat/completions".
	BaseURL string
	Model   string
	// APIKey is sent as a bearer token; never logged.
	APIKey string
	// Timeout bounds one rewrite (default 20s).
	Timeout time.Duration
	// Client, if set, sends the requests (tests).
	Client *http.Client
}

// String keeps the API key out of logs.
func (c OpenAIConfig) String() string {
	return fmt.Sprintf("OpenAIConfig{BaseURL:%s Model:%s APIKey:[redacted]}", c.BaseURL, c.Model)
}

// systemPrompt tells the model what to do and what to answer with.
const systemPrompt = "You rewrite prompts for a text-to-video and image-to-video model. " +
	"Expand the user's prompt into one detailed paragraph describing the subject, its motion, the scene, " +
	"the lighting, the style and the camera movement. Keep the user's language (answer in Chinese for a " +
	"Chinese prompt) and every detail the user gave. Answer with the rewritten prompt only, at most 800 characters."

// OpenAI rewrites prompts with an OpenAI-compatible chat-completions API.
type OpenAI struct {
	cfg    OpenAIConfig
	client *http.Client
}

// NewOpenAI checks cfg and returns the client.
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	if cfg.BaseURL == "" || cfg.Model == "" {
		return nil, errors.New("rewrite: an OpenAI-compatible rewriter needs a base URL and a model")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 20 * time.Second
	}
	client := cfg.Client
	if client == nil {
		client = &http.Client{}
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	return &OpenAI{cfg: cfg, client: client}, nil
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatRequest struct {
	Model    string        `json:"model"`
	Messages []chatMessage `json:"messages"`
}

type chatResponse struct {
	Choices []struct {
		Message chatMessage `json:"message"`
	} `json:"choices"`
}

// maxResponseBytes bounds what is read of an answer.
const maxResponseBytes = 1 << 20

// Rewrite implements Rewriter.
func (o *OpenAI) Rewrite(ctx context.Context, prompt string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, o.cfg.Timeout)
	defer cancel()
	body, err := json.Marshal(chatRequest{Model: o.cfg.Model, Messages: []chatMessage{
		{Role: "system", Content: systemPrompt}, {Role: "user", Content: prompt}}})
	if err != nil {
		return "", fmt.Errorf("rewrite: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.cfg.BaseURL+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("rewrite: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if o.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+o.cfg.APIKey)
	}
	resp, err := o.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("rewrite: chat completion: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return "", fmt.Errorf("rewrite: reading the chat completion: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("rewrite: chat completion answered HTTP %d", resp.StatusCode)
	}
	var out chatResponse
	if err := json.Unmarshal(raw, &out); err != nil {
		return "", fmt.Errorf("rewrite: decoding the chat completion: %w", err)
	}
	if len(out.Choices) == 0 || strings.TrimSpace(out.Choices[0].Message.Content) == "" {
		return "", errors.New("rewrite: the chat completion has no content")
	}
	return strings.TrimSpace(out.Choices[0].Message.Content), nil
}

// Fallback rewrites with Primary and, when it fails, with Secondary.
type Fallback struct {
	Primary, Secondary Rewriter
	Log                *slog.Logger
}

// Rewrite implements Rewriter.
func (f Fallback) Rewrite(ctx context.Context, prompt string) (string, error) {
	out, err := f.Primary.Rewrite(ctx, prompt)
	if err == nil {
		return out, nil
	}
	if ctx.Err() != nil {
		return "", ctx.Err() // the caller gave up; no point rewriting
	}
	if f.Log != nil {
		f.Log.Warn("prompt rewriting failed; using the rule-based rewriter instead", "err", err)
	}
	return f.Secondary.Rewrite(ctx, prompt)
}
