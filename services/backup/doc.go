// Package backup is Cairn's scheduled backup service (`cairn backup`, and a child of `cairn up --backup-dir`):
// every Interval it takes a snapshot through etcd's Maintenance.Snapshot from the first of its endpoints that
// answers (Cairn's or etcd's), and keeps the newest Keep of them in Dir.
//
// # Promises
//
//   - A snapshot is written to a hidden temporary name, fsynced, verified as a restore would check it (SHA-256
//     trailer, bbolt integrity), and only then renamed to snapshot-<UTC time>.db and the directory fsynced. So a
//     file named snapshot-*.db is always a complete, verified snapshot; a failed or interrupted one (bad
//     endpoints, a full disk, a failed verification, kill -9) leaves at most a temporary file, removed by the next
//     attempt.
//   - Failures are logged and counted by reason (cairn_backup_failures_total); successes set
//     cairn_backup_last_success_timestamp_seconds, cairn_backup_last_duration_seconds and
//     cairn_backup_last_size_bytes, so an operator can alert on "no backup for an hour". /health fails when the
//     last attempt failed or no success is younger than two intervals.
//   - Older snapshots beyond Keep are removed after each success, oldest first.
//
// # Needs
//
// Reachable client endpoints (TLS as etcdctl's flags) and a directory of its own.
package backup
