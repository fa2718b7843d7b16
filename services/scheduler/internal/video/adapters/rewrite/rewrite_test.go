package rewrite

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestRulesAreDeterministicAndFollowTheLanguage(t *testing.T) {
	ctx := context.Background()
	zh, _ := Rules{}.Rewrite(ctx, "一只猫在草地上奔跑。")
	again, _ := Rules{}.Rewrite(ctx, "一只猫在草地上奔跑。")
	if zh != again {
		t.Fatalf("two rewrites differ: %q, %q", zh, again)
	}
	if !strings.HasPrefix(zh, "一只猫在草地上奔跑，") || !strings.Contains(zh, "光") {
		t.Errorf("Chinese rewrite = %q", zh)
	}
	en, _ := Rules{}.Rewrite(ctx, "a cat running on grass.")
	if !strings.HasPrefix(en, "a cat running on grass, ") || !strings.Contains(en, "light") || strings.ContainsFunc(en, func(r rune) bool { return r > 0x2000 }) {
		t.Errorf("English rewrite = %q", en)
	}
}

func TestOpenAI(t *testing.T) {
	var got chatRequest
	var auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/chat/completions":
			auth = r.Header.Get("Authorization")
			if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			_, _ = w.Write([]byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":"  一只橘猫在阳光下的草地上奔跑 "}}]}`))
		case "/bad/v1/chat/completions":
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
		case "/empty/v1/chat/completions":
			_, _ = w.Write([]byte(`{"choices":[]}`))
		case "/slow/v1/chat/completions":
			time.Sleep(300 * time.Millisecond)
		}
	}))
	defer srv.Close()
	o, err := NewOpenAI(OpenAIConfig{BaseURL: srv.URL + "/v1/", Model: "qwen-plus", APIKey: "sk-secret"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := o.Rewrite(context.Background(), "一只猫")
	if err != nil || out != "一只橘猫在阳光下的草地上奔跑" {
		t.Fatalf("Rewrite = %q, %v", out, err)
	}
	if auth != "Bearer sk-secret" || got.Model != "qwen-plus" || len(got.Messages) != 2 || got.Messages[1].Content != "一只猫" || got.Messages[0].Role != "system" {
		t.Errorf("request: auth %q, body %+v", auth, got)
	}
	if s := (OpenAIConfig{APIKey: "sk-secret"}).String(); strings.Contains(s, "sk-secret") {
		t.Errorf("config prints its key: %s", s)
	}

	for _, prefix := range []string{"/bad", "/empty", "/slow", "/missing"} {
		o, _ := NewOpenAI(OpenAIConfig{BaseURL: srv.URL + prefix + "/v1", Model: "m", Timeout: 100 * time.Millisecond})
		if _, err := o.Rewrite(context.Background(), "a cat"); err == nil {
			t.Errorf("%s: no error", prefix)
		}
		var logs bytes.Buffer
		f := Fallback{Primary: o, Secondary: Rules{}, Log: slog.New(slog.NewTextHandler(&logs, nil))}
		out, err := f.Rewrite(context.Background(), "a cat")
		want, _ := Rules{}.Rewrite(context.Background(), "a cat")
		if err != nil || out != want || !strings.Contains(logs.String(), "rule-based") {
			t.Errorf("%s: fallback = %q, %v; log %q", prefix, out, err, logs.String())
		}
	}
	if _, err := NewOpenAI(OpenAIConfig{Model: "m"}); err == nil {
		t.Error("a rewriter without a base URL was accepted")
	}
}
