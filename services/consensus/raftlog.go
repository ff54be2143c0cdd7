package consensus

import (
	"context"
	"fmt"
	"log/slog"
)

// raftLogger writes raft's log lines to slog.
type raftLogger struct{ log *slog.Logger }

func newRaftLogger(log *slog.Logger) *raftLogger {
	return &raftLogger{log: log.With("component", "raft")}
}

func (l *raftLogger) emit(level slog.Level, msg string) { l.log.Log(context.Background(), level, msg) }

func (l *raftLogger) Debug(v ...any) { l.emit(slog.LevelDebug, fmt.Sprint(v...)) }
func (l *raftLogger) Debugf(format string, v ...any) {
	l.emit(slog.LevelDebug, fmt.Sprintf(format, v...))
}
func (l *raftLogger) Info(v ...any) { l.emit(slog.LevelInfo, fmt.Sprint(v...)) }
func (l *raftLogger) Infof(format string, v ...any) {
	l.emit(slog.LevelInfo, fmt.Sprintf(format, v...))
}
func (l *raftLogger) Warning(v ...any) { l.emit(slog.LevelWarn, fmt.Sprint(v...)) }
func (l *raftLogger) Warningf(format string, v ...any) {
	l.emit(slog.LevelWarn, fmt.Sprintf(format, v...))
}
func (l *raftLogger) Error(v ...any) { l.emit(slog.LevelError, fmt.Sprint(v...)) }
func (l *raftLogger) Errorf(format string, v ...any) {
	l.emit(slog.LevelError, fmt.Sprintf(format, v...))
}

// Fatal and Panic are raft's "cannot continue" paths; raft expects them not to return.
func (l *raftLogger) Fatal(v ...any) { l.Panic(v...) }
func (l *raftLogger) Fatalf(format string, v ...any) {
	l.Panicf(format, v...)
}
func (l *raftLogger) Panic(v ...any) {
	msg := fmt.Sprint(v...)
	l.emit(slog.LevelError, msg)
	panic(msg)
}
func (l *raftLogger) Panicf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.emit(slog.LevelError, msg)
	panic(msg)
}
