package storagepb

// The storage pipeline: a link (internal/link) on a storage's port, opened with PipelinePreamble. Its calls
// are Submit (body SubmitRequest, answer SubmitResponse) and Range (body etcd's RangeRequest, answer its
// RangeResponse, which the frontend relays undecoded) and RangeChecked (body etcd's InternalRaftRequest holding
// the Range and, in its header's auth_revision, the read fence (authstate.State.ReadFence) of the auth store the
// frontend checked the read against: storage refuses it with ErrAuthOldRevision when its own fence is higher
// once it has read; same answer as Range; a read-only Txn's Submit carries its fence the same way); an error
// answer is the gRPC status the unary RPC would give. The frontend (client) and storage (server) both take
// these from here.
const (
	PipelinePreamble = "CAIRN-STORAGE-PIPELINE/2\n"

	PipelineSubmit       uint64 = 1
	PipelineRange        uint64 = 2
	PipelineRangeChecked uint64 = 3
)

// PipelineMethodNames names the pipeline's methods, for spans.
var PipelineMethodNames = map[uint64]string{PipelineSubmit: "Submit", PipelineRange: "Range",
	PipelineRangeChecked: "RangeChecked"}
