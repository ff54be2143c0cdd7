package traceview

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText writes the report for a terminal: per operation type its end-to-end percentiles, the stage table
// and the critical path of its median trace; then the slowest traces.
func (r *Report) WriteText(w io.Writer) error {
	out := &errWriter{w: w}
	if len(r.Ops) == 0 {
		out.printf("no request traces yet (a trace's root must be a frontend span, with cairn.op)\n")
		return out.err
	}
	for _, op := range r.Ops {
		out.printf("%s: %d traces, end-to-end p50 %s  p90 %s  p99 %s  max %s\n",
			op.Op, op.Count, ms(op.P50), ms(op.P90), ms(op.P99), ms(op.Max))
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "  STAGE\tSPANS\tTRACES\tP50\tP90\tP99\tCRITICAL\t")
		for _, s := range op.Stages {
			name := s.Name
			if s.Linked {
				name += " (batch)"
			}
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%s\t%s\t%s\t%.1f%%\t\n", name, s.Count, s.Traces, ms(s.P50), ms(s.P90), ms(s.P99), 100*s.Share)
		}
		_ = tw.Flush()
		out.printf("  critical path of the median trace %s (%s): %s\n\n", op.Typical.ID, ms(op.Typical.Duration), pathText(op.Typical.Critical))
	}
	out.printf("slowest traces:\n")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  TRACE\tOP\tDURATION\tCRITICAL PATH")
	for _, t := range r.Slowest {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", t.ID, t.Op, ms(t.Duration), pathText(t.Critical))
	}
	_ = tw.Flush()
	return out.err
}

// pathText writes a critical path as "stage time › stage time ...".
func pathText(path []Segment) string {
	parts := make([]string, len(path))
	for i, seg := range path {
		parts[i] = seg.Name + " " + ms(seg.Self)
	}
	return strings.Join(parts, " › ")
}

// ms writes a duration in milliseconds with three significant figures or so.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0fms", v)
	case v >= 10:
		return fmt.Sprintf("%.1fms", v)
	default:
		return fmt.Sprintf("%.3fms", v)
	}
}

// errWriter keeps the first write error, so a report can be written without checking every line.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, args ...any) { fmt.Fprintf(e, format, args...) }
