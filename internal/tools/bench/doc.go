// Package bench is the load generator behind `cairn bench`: etcd's benchmark tool (tools/benchmark in the
// etcd repository) rebuilt as a library, so every Cairn benchmark shares one runner, one rate limiter and one
// report, and Cairn and etcd can be measured side by side with the same code.
//
// The pieces:
//
//   - Runner holds Conns gRPC connections (go.etcd.io/etcd/client/v3 clients) shared round-robin by Clients
//     worker goroutines, the way etcd's tool shares --conns among --clients. Run(ctx, name, op) calls op from
//     every worker until Total requests have been issued or Duration has passed (at least one bound is
//     required, so every load loop ends), optionally no faster than Rate requests per second overall, times
//     each call, and returns a Summary. Cancelling ctx stops issuing requests; calls in flight are cancelled
//     and not counted. Progress goes to RunnerConfig.Progress (stderr in the CLI) while Run works (internal/tools/progress).
//   - Op is one request: func(ctx, client, seq) error, where seq numbers the requests of one Run from 0.
//     PutOp, RangeOp and TxnPutOp build the KV benchmarks with etcd's key and value scheme. A later benchmark
//     is a new Op plus a file in cmd/cairn: LeaseKeepAlive.Op is lease-keepalive (one keep-alive round trip on
//     a long-lived stream with a lease of its own, as etcd's tool), LeaseGrantRevokeOp a grant and a revoke;
//     watch and watch-latency open their watchers through Runner.Clients()
//     and use Runner.Drive, which issues the Op (the puts) under the same bounds, rate limit and progress bar
//     but lets the Op's watcher goroutines Record one sample per event into a Report of their own.
//   - Report collects latencies (goroutine-safe Record) and errors; Summary computes etcd's statistics: total
//     time, requests/s, slowest, fastest, average, stddev, percentiles (p10 … p99.9) and a ten-bucket latency
//     histogram. Summary.WriteText prints the same layout as etcd's tool; Summary is also plain JSON
//     (`--output json`) so scripts can compare runs.
//   - Compare runs a list of Scenarios against several Targets (e.g. reference etcd and Cairn) in one process,
//     interleaved per scenario, and WriteComparison prints them as one table; WriteRoundsSummary folds several
//     rounds into medians, with each target's ratio to the baseline taken round by round. StandardScenarios are the rows of
//     etcd's performance documentation: put with 1 client, put with 1000 clients on 100 connections,
//     linearizable range and serializable range.
package bench
