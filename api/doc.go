// Package api holds Cairn's internal protocols: the gRPC services and messages its services speak to each
// other (never to etcd clients, which get etcdserverpb). Each sub-package is generated from the .proto file
// beside it; regenerate with `go generate ./api` (needs protoc, see gen.sh). Generated files are
// committed and never edited by hand.
//
// Internal messages embed etcd's own types (etcdserverpb, mvccpb) where the data is an etcd request, response,
// key-value or event, so no service re-encodes them.
package api

//go:generate bash ./gen.sh
