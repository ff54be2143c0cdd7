package traceview

// pageHTML is the page's template: plain HTML, inline CSS and SVG, no scripts.
const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
{{if gt .RefreshSeconds 0}}<meta http-equiv="refresh" content="{{.RefreshSeconds}}">{{end}}
<title>{{.Info.Title}}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em 2em; color: #222; background: #fff; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; }
h2 { font-size: 1.25em; margin-top: 2em; border-bottom: 1px solid #ddd; }
h3 { font-size: 1em; margin: 1.2em 0 0.3em; }
.meta { color: #555; max-width: 75em; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { padding: 2px 10px; text-align: right; font-variant-numeric: tabular-nums; }
th:first-child, td:first-child { text-align: left; }
th { border-bottom: 1px solid #bbb; font-weight: 600; }
tr:nth-child(even) td { background: #f6f6f6; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 6px; border-radius: 2px; }
.path { font-family: ui-monospace, monospace; font-size: 12px; color: #444; }
svg text { font: 11px ui-monospace, monospace; fill: #222; }
svg .axis { stroke: #e2e2e2; }
svg .crit { fill: none; stroke: #000; stroke-width: 1.5; }
svg .linked { stroke: #333; stroke-width: 1; stroke-dasharray: 3 2; }
svg .seg-label { font: 11px system-ui, sans-serif; fill: #fff; }
svg .bar-label { font: 12px system-ui, sans-serif; }
</style>
</head>
<body>
<h1>{{.Info.Title}}</h1>
<p class="meta">{{.Report.Traces}} request traces. Store: {{.Info.Store.Traces}} traces, {{.Info.Store.Spans}} spans kept (bound {{.Info.Store.MaxSpans}} spans; {{.Info.Store.Evicted}} evicted of {{.Info.Store.Received}} received){{if not .Info.Generated.IsZero}}; written {{rfc3339 .Info.Generated}}{{end}}.
A stage's share is its part of the end-to-end (root span) time on the critical path, so the shares of an operation type add up to 100%.
In the waterfalls a black outline marks the critical path, a dashed one and [batch] a batch span linked to the request; the time at the right of a row is the span's duration.</p>
{{if not .Report.Ops}}<p><strong>No request traces yet.</strong> Set OTEL_EXPORTER_OTLP_ENDPOINT (and OTEL_EXPORTER_OTLP_INSECURE=true) on the services to this receiver and send some requests.</p>{{end}}
{{if .Bars}}
<h2 id="where">Where the time went</h2>
<svg width="1200" height="{{.BarsHeight}}" viewBox="0 0 1200 {{.BarsHeight}}" role="img" aria-label="critical path time per operation type">
{{range .Bars}}<g transform="translate(0,{{.Y}})">
<text class="bar-label" x="0" y="16">{{.Label}}</text>
{{range .Segments}}<rect x="{{px .X}}" y="2" width="{{px .Width}}" height="20" fill="{{.Color}}" transform="translate(300,0)"><title>{{.Title}}</title></rect>
{{if .ShowLabel}}<text class="seg-label" x="{{px .X}}" y="16" dx="4" transform="translate(300,0)">{{.Stage}}</text>{{end}}
{{end}}<text class="bar-label" x="1068" y="16">{{.Note}}</text></g>
{{end}}</svg>
{{end}}
{{range .Sections}}{{$op := .Op}}
<h2 id="op-{{$op.Op}}">{{$op.Op}}</h2>
<p>{{$op.Count}} traces; end-to-end p50 {{ms $op.P50}}, p90 {{ms $op.P90}}, p99 {{ms $op.P99}}, max {{ms $op.Max}}.</p>
<table>
<thead><tr><th>stage</th><th>spans</th><th>traces</th><th>p50</th><th>p90</th><th>p99</th><th>critical path share</th></tr></thead>
<tbody>
{{range $op.Stages}}<tr><td><span class="swatch" style="background: {{color .Name | safeCSS}}"></span>{{.Name}}{{if .Linked}} [batch]{{end}}</td><td>{{.Count}}</td><td>{{.Traces}}</td><td>{{ms .P50}}</td><td>{{ms .P90}}</td><td>{{ms .P99}}</td><td>{{percent .Share}}</td></tr>
{{end}}</tbody>
</table>
{{range .Waterfalls}}
<h3>{{.Caption}} {{.View.ID}}: {{ms .View.Duration}}</h3>
<p class="path">critical path: {{range $i, $s := .View.Critical}}{{if $i}} › {{end}}{{$s.Name}} {{ms $s.Self}}{{end}}</p>
<svg width="1200" height="{{.Height}}" viewBox="0 0 1200 {{.Height}}" role="img" aria-label="waterfall of trace {{.View.ID}}">
{{$height := .Height}}{{range .Ticks}}<line class="axis" x1="{{px .X}}" y1="14" x2="{{px .X}}" y2="{{$height}}"></line><text x="{{px .X}}" y="11" text-anchor="middle">{{.Label}}</text>
{{end}}{{range .Rows}}<g><title>{{.Title}}</title>
<text x="{{px .Indent}}" y="{{.TextY}}">{{.Label}}</text>
<rect x="{{px .X}}" y="{{.Y}}" width="{{px .Width}}" height="14" fill="{{.Color}}"{{if .Linked}} class="linked"{{end}}></rect>
{{if .OnCritical}}<rect class="crit" x="{{px .X}}" y="{{.Y}}" width="{{px .Width}}" height="14"></rect>{{end}}
<text x="{{px .TimeX}}" y="{{.TextY}}">{{.Time}}</text></g>
{{end}}</svg>
{{if .Omitted}}<p class="meta">{{.Omitted}} more spans not drawn.</p>{{end}}
{{end}}
{{end}}
{{if .Report.Slowest}}
<h2 id="slowest">Slowest traces</h2>
<table>
<thead><tr><th>trace</th><th>op</th><th>duration</th><th style="text-align:left">critical path</th></tr></thead>
<tbody>
{{range .Report.Slowest}}<tr><td class="path">{{.ID}}</td><td>{{.Op}}</td><td>{{ms .Duration}}</td><td class="path" style="text-align:left">{{range $i, $s := .Critical}}{{if $i}} › {{end}}{{$s.Name}} {{ms $s.Self}}{{end}}</td></tr>
{{end}}</tbody>
</table>
{{end}}
</body>
</html>
`
