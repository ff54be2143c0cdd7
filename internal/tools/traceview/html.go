package traceview

import (
	"fmt"
	"hash/fnv"
	"html/template"
	"io"
	"strings"
	"time"
)

// PageInfo is what the page says about where its spans came from.
type PageInfo struct {
	Title string
	Store StoreStats
	// Generated is when the page was written (shown as is).
	Generated time.Time
	// Refresh, when positive, makes the page reload itself every Refresh (a live view without scripts).
	Refresh time.Duration
}

// WriteHTML writes the report as one self-contained HTML page: a stacked bar per operation type of where the
// critical path's time went, each type's stage table, waterfalls of its median and slowest trace, and the
// slowest traces. Inline CSS and SVG only.
func (r *Report) WriteHTML(w io.Writer, info PageInfo) error {
	if info.Title == "" {
		info.Title = "Cairn traces: where the time goes"
	}
	data := pageData{Info: info, Report: r, RefreshSeconds: int(info.Refresh.Seconds()), BarsHeight: 10 + barRowH*len(r.Ops)}
	for i, op := range r.Ops {
		b := stackedBar(op)
		b.Y = 4 + i*barRowH
		data.Bars = append(data.Bars, b)
		data.Sections = append(data.Sections, section{Op: op,
			Waterfalls: []waterfall{waterfallOf("median trace", op.Typical), waterfallOf("slowest trace", op.Slowest)}})
	}
	return pageTemplate.Execute(w, data)
}

type pageData struct {
	Info           PageInfo
	Report         *Report
	RefreshSeconds int
	BarsHeight     int
	Bars           []bar
	Sections       []section
}

type section struct {
	Op         *OpReport
	Waterfalls []waterfall
}

// bar is one operation type's stacked bar: its critical path shares, stage by stage.
type bar struct {
	Op       string
	Label    string
	Note     string
	Y        int
	Segments []barSegment
}

type barSegment struct {
	Stage        string
	X, Width     float64
	Color, Title string
	ShowLabel    bool
}

const (
	barWidth      = 760.0
	barRowH       = 30
	waterLabelW   = 300.0
	waterBarW     = 780.0
	waterRowH     = 18
	waterMaxSpans = 300
)

func stackedBar(op *OpReport) bar {
	b := bar{Op: op.Op, Label: op.Op, Note: fmt.Sprintf("%d, p50 %s", op.Count, ms(op.P50))}
	x := 0.0
	for _, s := range op.Stages {
		if s.Share <= 0 {
			continue
		}
		width := s.Share * barWidth
		b.Segments = append(b.Segments, barSegment{Stage: s.Name, X: x, Width: width, Color: stageColor(s.Name),
			Title: fmt.Sprintf("%s: %.1f%% of end-to-end time (p50 %s)", s.Name, 100*s.Share, ms(s.P50)), ShowLabel: width > 70})
		x += width
	}
	return b
}

// waterfall is one trace drawn as rows of bars on a common time axis.
type waterfall struct {
	Caption string
	View    *TraceView
	Height  int
	Rows    []waterRow
	Ticks   []tick
	Omitted int
}

type waterRow struct {
	Y, TextY                  int
	Indent, X, Width, TimeX   float64
	Label, Time, Color, Title string
	Linked, OnCritical        bool
}

type tick struct {
	X     float64
	Label string
}

func waterfallOf(caption string, v *TraceView) waterfall {
	w := waterfall{Caption: caption, View: v}
	spans := v.Spans
	if len(spans) > waterMaxSpans {
		w.Omitted = len(spans) - waterMaxSpans
		spans = spans[:waterMaxSpans]
	}
	scale := 0.0
	if v.Duration > 0 {
		scale = waterBarW / float64(v.Duration)
	}
	for i := 0; i <= 4; i++ {
		w.Ticks = append(w.Ticks, tick{X: waterLabelW + float64(i)*waterBarW/4, Label: ms(v.Duration * time.Duration(i) / 4)})
	}
	for i, s := range spans {
		y := 22 + i*waterRowH
		x := waterLabelW + max(0, float64(s.Offset))*scale
		width := max(1, float64(s.Duration())*scale)
		// A span that ends after the root (another member's apply, a bbolt commit) is cut at the chart's
		// edge, so it never runs over the times at the right.
		width = max(1, min(width, waterLabelW+waterBarW-x))
		x = min(x, waterLabelW+waterBarW-width)
		label := s.Name
		if s.Linked {
			label += " [batch]"
		}
		title := fmt.Sprintf("%s  %s at +%s  (%s %s)", s.Name, ms(s.Duration()), ms(s.Offset), s.Service, s.Instance)
		if s.Critical > 0 {
			title += fmt.Sprintf("; %s on the critical path", ms(s.Critical))
		}
		if s.Linked {
			title += "; batch span linked to this request"
		}
		if after := s.Offset + s.Duration() - v.Duration; after > 0 {
			title += fmt.Sprintf("; ends %s after the request (cut at the edge)", ms(after))
		}
		for _, key := range []string{"raft.index", "mvcc.revision", "cairn.batch.size", "cairn.count", "cairn.bytes"} {
			if value := s.Attr(key); value != "" {
				title += fmt.Sprintf("; %s=%s", key, value)
			}
		}
		indent := 4 + float64(min(s.Depth, 20))*12
		w.Rows = append(w.Rows, waterRow{Y: y, TextY: y + 12, Indent: indent, Label: fitLabel(label, indent),
			Time: ms(s.Duration()), Color: stageColor(s.Name), X: x, Width: width, TimeX: waterLabelW + waterBarW + 6,
			Linked: s.Linked, OnCritical: s.Critical > 0, Title: title})
	}
	w.Height = 30 + len(w.Rows)*waterRowH
	return w
}

// waterCharW is the width of a character of the waterfall's labels (11px monospace).
const waterCharW = 6.7

// fitLabel cuts a waterfall label that would run from indent into the bars, with an ellipsis (the row's
// title keeps the whole name).
func fitLabel(label string, indent float64) string {
	room := max(4, int((waterLabelW-8-indent)/waterCharW))
	if runes := []rune(label); len(runes) > room {
		return string(runes[:room-1]) + "…"
	}
	return label
}

// serviceHues gives each Cairn service a hue, so a stage's color says where it ran.
var serviceHues = map[string]uint32{"frontend": 210, "storage": 130, "consensus": 20, "watchhub": 280, "leasekeeper": 50}

// stageColor is a stage's color: its service's hue, a lightness from its name.
func stageColor(name string) string {
	service, _, _ := strings.Cut(name, ".")
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	sum := h.Sum32()
	hue, ok := serviceHues[service]
	if !ok {
		hue = sum % 360
	}
	return fmt.Sprintf("hsl(%d,%d%%,%d%%)", (hue+(sum>>8)%24)%360, 55+(sum>>4)%25, 42+(sum>>12)%28)
}

func percent(share float64) string { return fmt.Sprintf("%.1f%%", 100*share) }

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"ms": ms, "percent": percent, "color": stageColor,
	"safeCSS": func(s string) template.CSS { return template.CSS(s) }, // stageColor's own hsl(), never input
	"px":      func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"rfc3339": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
}).Parse(pageHTML))
