// Package storageclient is the typed Go client of a member's Storage service (api/storagepb): etcd
// writes go through Submit and come back as etcd's responses; reads, history, hashes, snapshots, status and lease
// queries map one to one onto the RPCs. Errors are the service's gRPC status errors, unchanged, so etcd's
// rpctypes errors can be compared and passed on to etcd clients as they are.
package storageclient
