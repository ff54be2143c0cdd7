// Package config holds the pieces every service's configuration shares: the comma-separated URL list flag,
// host:port parsing of the http:// URLs services listen on and dial, and defaulting of unset fields.
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
	if !strings.Contains(raw, "://") {
		if _, _, err := net.SplitHostPort(raw); err != nil {
			return "", fmt.Errorf("URL %q: want http://host:port", raw)
		}
		return raw, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("URL %q: %w", raw, err)
	}
	if u.Scheme != "http" {
		return "", fmt.Errorf("URL %q: scheme %q, want http (TLS is not supported yet)", raw, u.Scheme)
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		return "", fmt.Errorf("URL %q: want http://host:port", raw)
	}
	if u.Path != "" && u.Path != "/" {
		return "", fmt.Errorf("URL %q: must not contain a path", raw)
	}
	return u.Host, nil
}

// SetDefault sets *field to value when it holds the zero value.
func SetDefault[T comparable](field *T, value T) {
	var zero T
	if *field == zero {
		*field = value
	}
}
