// Package e2e holds Cairn's end-to-end tests: they build the cairn binary once per run, start real stacks
// (`cairn up` with 3 members, `cairn dev`) on free loopback ports in temporary directories, and drive them
// with the real etcdctl v3.7.3 (built by internal/tools/etcdref from the Go module proxy) and go.etcd.io/etcd/client/v3,
// comparing what etcdctl prints against a real 3-member etcd v3.7.3 running the same commands, and crashing
// processes with kill -9 to check that no acknowledged write is lost. Where podman and podman-compose run (as
// root; .ci/podman-setup.sh installs them), TestComposeStack and TestComposeStackTLS run deploy/compose's
// stacks in containers; elsewhere they skip, saying why.
//
// The package has no non-test code; `go test ./e2e` runs everything in a few minutes (the first run on a
// machine also builds etcd, about a minute).
package e2e
