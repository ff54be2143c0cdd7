// Package api holds Cairn's internal protocols: the gRPC services and messages its services speak to each
// other (never to etcd clients, which get etcdserverpb). Each sub-package is generated from the .proto file
// beside it; regenerate with `go generate ./api` (needs protoc, see gen.sh). Generated files are
// committed and never edited by hand.
//
// v3lockpb and v3electionpb are etcd's own Lock and Election protos (copied from go.etcd.io/etcd/server/v3,
// which Cairn never imports; only go_package and an import path changed), served to etcd clients; their gw
// packages are etcd's generated grpc-gateway handlers with the import path changed.
//
// Internal messages embed etcd's own types (etcdserverpb, mvccpb) where the data is an etcd request, response,
// key-value or event, so no service re-encodes them.
package api

//go:generate bash ./gen.sh
