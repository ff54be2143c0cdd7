// Package config holds the pieces every service's configuration shares: the comma-separated URL list flag,
// host:port parsing of the http:// URLs services listen on and dial (and of https:// client URLs), binding a
// URL unless the caller passed a listener, defaulting of unset fields, and the FieldError each Validate
// reports a refused setting with.
package config

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// URLList is a comma-separated list flag (etcd's --listen-client-urls style); blanks are dropped.
type URLList []string

// String joins the list with commas.
func (l *URLList) String() string { return strings.Join(*l, ",") }

// Set replaces the list with the comma-separated values of s.
func (l *URLList) Set(s string) error {
	*l = nil
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			*l = append(*l, u)
		}
	}
	return nil
}

// HostPort returns the host:port of an http:// URL without a path, or of a bare host:port.
func HostPort(raw string) (string, error) {
	hostPort, secure, err := ClientHostPort(raw)
	if err == nil && secure {
		return "", fmt.Errorf("URL %q: scheme \"https\", want http (TLS is served on client URLs only)", raw)
	}
	return hostPort, err
}

// ClientHostPort is HostPort for a client URL, which may also be https:// (served with TLS): it returns the
// host:port and whether the URL is https.
func ClientHostPort(raw string) (hostPort string, secure bool, err error) {
	if !strings.Contains(raw, "://") {
		if _, _, err := net.SplitHostPort(raw); err != nil {
			return "", false, fmt.Errorf("URL %q: want http://host:port", raw)
		}
		return raw, false, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", false, fmt.Errorf("URL %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", false, fmt.Errorf("URL %q: scheme %q, want http or https", raw, u.Scheme)
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		return "", false, fmt.Errorf("URL %q: want %s://host:port", raw, u.Scheme)
	}
	if u.Path != "" && u.Path != "/" {
		return "", false, fmt.Errorf("URL %q: must not contain a path", raw)
	}
	return u.Host, u.Scheme == "https", nil
}

// CheckEtcdURL checks a URL given to a flag etcd has too (--listen-client-urls, --advertise-client-urls,
// --listen-peer-urls, --initial-advertise-peer-urls, --listen-metrics-urls) as etcd's types.NewURLs does, in
// its words: a scheme is required, so "127.0.0.1:2379" is refused where Cairn's own endpoint flags take it.
// Cairn serves no unix sockets, so unix:// and unixs:// are refused as well.
func CheckEtcdURL(raw string) error {
	if !strings.Contains(raw, "://") {
		// etcd's url.Parse error for "127.0.0.1:2379" ("first path segment in URL cannot contain colon") hides
		// what is missing; its scheme check says it.
		return fmt.Errorf("URL scheme must be http, https, unix, or unixs: %s", raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	switch u.Scheme {
	case "http", "https":
		if _, _, err := net.SplitHostPort(u.Host); err != nil {
			return fmt.Errorf(`URL address does not have the form "host:port": %s`, raw)
		}
		if u.Path != "" {
			return fmt.Errorf("URL must not contain a path: %s", raw)
		}
		return nil
	case "unix", "unixs":
		return fmt.Errorf("URL scheme %s is not supported by Cairn (http or https): %s", u.Scheme, raw)
	}
	return fmt.Errorf("URL scheme must be http, https, unix, or unixs: %s", raw)
}

// SetDefault sets *field to value when it holds the zero value.
func SetDefault[T comparable](field *T, value T) {
	var zero T
	if *field == zero {
		*field = value
	}
}

// Listen returns given when the caller bound a listener beforehand (a test cluster, `cairn dev`), else a
// listener on the host:port of the http:// URL raw.
func Listen(given net.Listener, raw string) (net.Listener, error) {
	if given != nil {
		return given, nil
	}
	addr, err := HostPort(raw)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", raw, err)
	}
	return lis, nil
}

// FieldError is one setting that Validate refused: Field is the flag's name (or the Config field's, for a
// setting without a flag) and Err says why. A service's Validate joins one per refused setting; errors.As
// and Fields find them.
type FieldError struct {
	Field string
	Err   error
}

// Invalid returns a FieldError for field; format and args are fmt.Errorf's (so %w wraps a cause). The message
// reads as etcd's do, beginning with the flag ("--name must not be empty"); one that does not (a wrapped cause
// alone) is prefixed with it.
func Invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

// Error is the message when it begins with the field's name, else "field: message".
func (e *FieldError) Error() string {
	msg := e.Err.Error()
	if strings.HasPrefix(msg, e.Field) {
		return msg
	}
	return e.Field + ": " + msg
}

// Unwrap returns the reason.
func (e *FieldError) Unwrap() error { return e.Err }

// Fields returns the fields of every FieldError in err (a Validate error, which joins several), in order.
func Fields(err error) []string {
	var fields []string
	var walk func(error)
	walk = func(err error) {
		if fe, ok := err.(*FieldError); ok {
			fields = append(fields, fe.Field)
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	if err != nil {
		walk(err)
	}
	return fields
}
