package weburl_test

import (
	"strings"
	"testing"

	"github.com/taskmesh/taskmesh/platform/domain/weburl"
)

func TestProblem(t *testing.T) {
	cases := []struct {
		raw  string
		want string // a part of the problem; "" for none
	}{
		{"https://hooks.example.com/taskmesh?x=1", ""},
		{"http://203.0.113.7:8080/hook", ""},
		{"http://[2001:db8::1]/hook", ""},
		{"http://127.0.0.1:9000/", ""}, // whether it may be called is decided when it is called
		{"http://v1.example/hook", ""},
		{"http://1.example/hook", ""}, // a number, but not the last label
		{"http://example.123abc/hook", ""},
		{"ftp://example.com/", "must be an http or https URL"},
		{"https:///path", "has no host"},
		{"https://user:pw@example.com/", "must not carry credentials"},
		{"https://exa mple.com/", "is not a valid URL"},
		{"https://example.com/\x00", "is not a valid URL"},
		{"https://example.com/" + strings.Repeat("a", 2048), "is longer than 2048 characters"},
		// inet_aton's and the URL standard's other IPv4 forms.
		{"http://167772161/", `numeric host "167772161"`},
		{"http://012.0.0.1/", `numeric host "012.0.0.1"`},
		{"http://0x7f.1/", `numeric host "0x7f.1"`},
		{"http://127.1/", `numeric host "127.1"`},
		{"http://0X7F000001:80/", `numeric host "0X7F000001"`},
		{"http://1.2.3.4./", `numeric host "1.2.3.4."`},
		{"http://1.2.3.4.5/", `numeric host "1.2.3.4.5"`},
		{"http://example.com.123/", `numeric host "example.com.123"`},
		{"http://example.0x/", `numeric host "example.0x"`}, // "0x" is 0 to the URL standard
	}
	for _, c := range cases {
		got := weburl.Problem(c.raw, 2048)
		switch {
		case c.want == "" && got != "":
			t.Errorf("Problem(%q) = %q, want none", c.raw, got)
		case c.want != "" && !strings.Contains(got, c.want):
			t.Errorf("Problem(%q) = %q, want it to say %q", c.raw, got, c.want)
		}
	}
}
