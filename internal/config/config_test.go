package config

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestHostPort(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw, want string
		ok        bool
	}{
		{"http://127.0.0.1:2379", "127.0.0.1:2379", true},
		{"http://127.0.0.1:2379/", "127.0.0.1:2379", true},
		{"127.0.0.1:2379", "127.0.0.1:2379", true},
		{"localhost:0", "localhost:0", true},
		{"https://127.0.0.1:2379", "", false},
		{"ftp://a:1", "", false},
		{"http://127.0.0.1", "", false},
		{"http://127.0.0.1:2379/v3", "", false},
		{"127.0.0.1", "", false},
		{"", "", false},
	} {
		got, err := HostPort(tc.raw)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("HostPort(%q) = %q, %v; want %q, ok=%v", tc.raw, got, err, tc.want, tc.ok)
		}
	}
}

func TestCheckEtcdURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw, wantErr string // wantErr: etcd's words, "" for a URL etcd takes
	}{
		{"http://127.0.0.1:2379", ""},
		{"https://127.0.0.1:2379", ""},
		{"127.0.0.1:2379", "URL scheme must be http, https, unix, or unixs: 127.0.0.1:2379"},
		{"localhost:2379", "URL scheme must be http, https, unix, or unixs: localhost:2379"},
		{"ftp://a:1", "URL scheme must be http, https, unix, or unixs: ftp://a:1"},
		{"http://127.0.0.1", `URL address does not have the form "host:port": http://127.0.0.1`},
		{"http://127.0.0.1:2379/v3", "URL must not contain a path: http://127.0.0.1:2379/v3"},
		{"unix://a:1", "not supported by Cairn"},
	} {
		err := CheckEtcdURL(tc.raw)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("CheckEtcdURL(%q) = %v, want %q", tc.raw, err, tc.wantErr)
		}
	}
}

func TestClientHostPort(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw, want  string
		secure, ok bool
	}{
		{"http://127.0.0.1:2379", "127.0.0.1:2379", false, true},
		{"https://127.0.0.1:2379", "127.0.0.1:2379", true, true},
		{"127.0.0.1:2379", "127.0.0.1:2379", false, true},
		{"https://127.0.0.1", "", false, false},
		{"unix://a:1", "", false, false},
	} {
		got, secure, err := ClientHostPort(tc.raw)
		if (err == nil) != tc.ok || got != tc.want || secure != tc.secure {
			t.Errorf("ClientHostPort(%q) = %q, %v, %v; want %q, %v, ok=%v", tc.raw, got, secure, err, tc.want, tc.secure, tc.ok)
		}
	}
}

func TestURLListFlag(t *testing.T) {
	t.Parallel()
	var l URLList
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Var(&l, "urls", "")
	if err := fs.Parse([]string{"--urls", " http://a:1, ,http://b:2 "}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"http://a:1", "http://b:2"}; !slices.Equal(l, want) {
		t.Fatalf("got %q, want %q", l, want)
	}
	if got := l.String(); got != "http://a:1,http://b:2" {
		t.Fatalf("String() = %q", got)
	}
}

func TestSetDefault(t *testing.T) {
	t.Parallel()
	d, n := time.Duration(0), 7
	SetDefault(&d, time.Second)
	SetDefault(&n, 9)
	if d != time.Second || n != 7 {
		t.Fatalf("got %v, %d; want 1s, 7", d, n)
	}
}

func TestListen(t *testing.T) {
	given, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer given.Close()
	tests := []struct {
		name    string
		given   net.Listener
		url     string
		wantErr bool
		want    func(net.Listener) bool
	}{
		{"a given listener is used as it is", given, "http://127.0.0.1:1", false, func(l net.Listener) bool { return l == given }},
		{"a URL is bound", nil, "http://127.0.0.1:0", false, func(l net.Listener) bool { return l != given }},
		{"a bad URL", nil, "ftp://x", true, nil},
		{"a URL already bound", nil, "http://" + given.Addr().String(), true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lis, err := Listen(tt.given, tt.url)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Listen(%q) = %v, want error %v", tt.url, err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if lis != given {
				defer lis.Close()
			}
			if !tt.want(lis) {
				t.Fatalf("Listen(%q) = %v", tt.url, lis.Addr())
			}
		})
	}
}

func TestFieldError(t *testing.T) {
	cause := errors.New("no port")
	tests := []struct {
		name     string
		err      error
		wantText string
		wantIs   error
		wantAll  []string
	}{
		{"reason after the field", Invalid("--name", "must not be empty"), "--name: must not be empty", nil, []string{"--name"}},
		{"etcd's wording kept", Invalid("--election-timeout", "--election-timeout[400] should be at least"),
			"--election-timeout[400] should be at least", nil, []string{"--election-timeout"}},
		{"a wrapped cause", Invalid("--listen-url", "%w", cause), "--listen-url: no port", cause, []string{"--listen-url"}},
		{"joined, as Validate returns them", errors.Join(Invalid("--a", "bad"), fmt.Errorf("ctx: %w", Invalid("--b", "bad"))),
			"--a: bad\nctx: --b: bad", nil, []string{"--a", "--b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.wantText {
				t.Errorf("Error() = %q, want %q", got, tt.wantText)
			}
			if tt.wantIs != nil && !errors.Is(tt.err, tt.wantIs) {
				t.Errorf("errors.Is(%v, %v) = false", tt.err, tt.wantIs)
			}
			if got := Fields(tt.err); !slices.Equal(got, tt.wantAll) {
				t.Errorf("Fields() = %v, want %v", got, tt.wantAll)
			}
			var fe *FieldError
			if !errors.As(tt.err, &fe) || fe.Field != tt.wantAll[0] {
				t.Errorf("errors.As found %v, want field %s", fe, tt.wantAll[0])
			}
		})
	}
}
