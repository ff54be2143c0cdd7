package obs

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// NewLogger returns a JSON logger that tags every line with the service name, and with the member name when
// one is given, so lines from a multi-process stack can be merged and filtered.
func NewLogger(w io.Writer, service, member string, level slog.Level) *slog.Logger {
	attrs := []slog.Attr{slog.String("service", service)}
	if member != "" {
		attrs = append(attrs, slog.String("member", member))
	}
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})
	return slog.New(h.WithAttrs(attrs))
}

// ParseLevel reads a level name as etcd's --log-level takes it (debug, info, warn, error).
func ParseLevel(name string) (slog.Level, error) {
	switch strings.ToLower(name) {
	case "debug":
		return slog.LevelDebug, nil
	case "", "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error", "panic", "fatal":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("unknown log level %q (want debug, info, warn or error)", name)
}
