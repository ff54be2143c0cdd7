package config

import (
	"flag"
	"slices"
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
