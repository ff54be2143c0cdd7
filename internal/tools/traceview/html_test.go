package traceview

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
)

func TestHTMLPageIsWellFormed(t *testing.T) {
	b := spanBuilder{epoch: time.Unix(1_700_000_000, 0)}
	spans := []*Span{
		withOp(b.span(1, 1, 0, "frontend.receive", 0, 10), "put"),
		b.span(1, 2, 1, "storage.propose", 1, 9),
		withLinks(b.span(3, 1, 0, "consensus.wal_fsync", 3, 7), SpanRef{traceID(1), spanID(2)}),
		withOp(b.span(2, 1, 0, "frontend.receive", 0, 3), "range.linearizable"),
		b.span(2, 2, 1, "consensus.read_index", 0.5, 2),
		withOp(b.span(4, 1, 0, "frontend.receive", 0, 1), "<script>alert(1)</script>"), // hostile op names are escaped
	}
	tests := []struct {
		name   string
		report *Report
		want   []string
	}{
		{"traces", Analyze(group(spans...), Options{}),
			[]string{"put", "range.linearizable", "frontend.receive", "storage.propose", "consensus.wal_fsync", "consensus.read_index",
				"Where the time went", "Slowest traces", "median trace", "slowest trace"}},
		{"empty", Analyze(nil, Options{}), []string{"No request traces yet"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var page bytes.Buffer
			if err := tt.report.WriteHTML(&page, PageInfo{Store: StoreStats{MaxSpans: 10}}); err != nil {
				t.Fatal(err)
			}
			if err := balanced(page.Bytes()); err != nil {
				t.Fatalf("page not well-formed: %v\n%s", err, page.String())
			}
			doc, err := html.Parse(bytes.NewReader(page.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			text, counts := textAndCounts(doc)
			for _, want := range tt.want {
				if !strings.Contains(text, want) {
					t.Errorf("page text lacks %q", want)
				}
			}
			if counts["script"] != 0 || counts["link"] != 0 || counts["img"] != 0 {
				t.Errorf("page has scripts or external assets: %v", counts)
			}
			if tt.report.Ops != nil && (counts["svg"] != 1+2*len(tt.report.Ops) || counts["rect"] == 0) {
				t.Errorf("page has %d svg pictures and %d rects, want a stacked bar and 2 waterfalls per op type (%d)",
					counts["svg"], counts["rect"], len(tt.report.Ops))
			}
		})
	}
}

// voidElements have no end tag in HTML.
var voidElements = map[string]bool{"meta": true, "br": true, "hr": true, "img": true, "input": true, "link": true}

// balanced checks that every element is closed, in order, as a strict reader of the page would want.
func balanced(page []byte) error {
	z := html.NewTokenizer(bytes.NewReader(page))
	var open []string
	for {
		switch z.Next() {
		case html.ErrorToken:
			if !errors.Is(z.Err(), io.EOF) {
				return z.Err()
			}
			if len(open) != 0 {
				return errors.New("unclosed: " + strings.Join(open, " > "))
			}
			return nil
		case html.StartTagToken:
			if name, _ := z.TagName(); !voidElements[string(name)] {
				open = append(open, string(name))
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			if len(open) == 0 || open[len(open)-1] != string(name) {
				return errors.New("</" + string(name) + "> closes " + strings.Join(open, " > "))
			}
			open = open[:len(open)-1]
		}
	}
}

func textAndCounts(doc *html.Node) (string, map[string]int) {
	var text strings.Builder
	counts := map[string]int{}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		switch n.Type {
		case html.TextNode:
			text.WriteString(n.Data)
			text.WriteByte(' ')
		case html.ElementNode:
			counts[n.Data]++
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	return text.String(), counts
}

// TestWaterfallStaysInItsColumns: a span that outlives the request is cut at the chart's edge (it used to run
// over the times at the right), and a deep row's long name is cut before the bars.
func TestWaterfallStaysInItsColumns(t *testing.T) {
	b := spanBuilder{epoch: time.Unix(1_700_000_000, 0)}
	spans := []*Span{withOp(b.span(1, 1, 0, "frontend.receive", 0, 10), "put")}
	for depth := byte(2); depth < 14; depth++ {
		spans = append(spans, b.span(1, depth, depth-1, "consensus.propose/ReadIndex"+ClientSuffix, 1, 9))
	}
	spans = append(spans, b.span(1, 20, 1, "storage.bbolt_commit", 8, 30), b.span(1, 21, 1, "storage.apply", 12, 14))
	report := Analyze(group(spans...), Options{})
	w := waterfallOf("median", report.Ops[0].Typical)
	for _, row := range w.Rows {
		if row.X < waterLabelW || row.X+row.Width > waterLabelW+waterBarW+0.001 {
			t.Errorf("row %q bar [%.1f, %.1f] leaves the chart [%v, %v]", row.Label, row.X, row.X+row.Width, waterLabelW, waterLabelW+waterBarW)
		}
		if end := row.Indent + float64(len([]rune(row.Label)))*waterCharW; end > waterLabelW {
			t.Errorf("label %q at %.0f runs to %.0f, into the bars at %v", row.Label, row.Indent, end, waterLabelW)
		}
	}
}
