// Package progress prints how far a long task has come, the one progress printer of the cairn tools (bench
// runs, snapshot restore, encryption rewrap): on a terminal a line redrawn in place a few times a second;
// written to a file or a pipe, where a redrawn line would pile up hundreds of carriage returns, a plain line
// every few seconds. Either way the last state is printed once more, on its own line, when the task ends.
//
// Lifecycle: Start(out, status) → Stop(). Between them a goroutine owned by the Meter calls status (which
// must be safe to call concurrently with the task, e.g. reading atomics) and prints what it returns.
package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Intervals between prints.
const (
	// TerminalInterval is how often a terminal's line is redrawn.
	TerminalInterval = 200 * time.Millisecond
	// LineInterval is how often a plain line is printed to a file or a pipe.
	LineInterval = 5 * time.Second
)

// Meter prints a task's status until Stop.
type Meter struct {
	out      io.Writer
	terminal bool
	status   func() string
	stop     chan struct{}
	once     sync.Once
	loop     sync.WaitGroup
}

// IsTerminal reports whether out is a terminal (a character device), as the progress of a task is drawn.
func IsTerminal(out io.Writer) bool {
	f, ok := out.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Start prints status() to out every TerminalInterval (redrawn in place) when out is a terminal, else every
// LineInterval (a line each). A nil out prints nothing.
func Start(out io.Writer, status func() string) *Meter {
	terminal := IsTerminal(out)
	interval := LineInterval
	if terminal {
		interval = TerminalInterval
	}
	return start(out, terminal, interval, status)
}

func start(out io.Writer, terminal bool, interval time.Duration, status func() string) *Meter {
	m := &Meter{out: out, terminal: terminal, status: status, stop: make(chan struct{})}
	if out == nil {
		return m
	}
	m.loop.Go(func() {
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-ticker.C:
				m.print(false)
			}
		}
	})
	return m
}

// print writes the current status: redrawn in place on a terminal (ending the line when final), else a line.
func (m *Meter) print(final bool) {
	text := m.status()
	switch {
	case !m.terminal:
		fmt.Fprintln(m.out, text)
	case final:
		fmt.Fprintf(m.out, "\r\033[K%s\n", text)
	default:
		fmt.Fprintf(m.out, "\r\033[K%s", text)
	}
}

// Stop ends the printing and prints the final status once; safe to call twice.
func (m *Meter) Stop() {
	m.once.Do(func() {
		close(m.stop)
		m.loop.Wait()
		if m.out != nil {
			m.print(true)
		}
	})
}
