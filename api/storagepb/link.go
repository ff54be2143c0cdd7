package storagepb

// The storage pipeline: a link (internal/link) on a storage's port, opened with PipelinePreamble. Its calls
// are Submit (body SubmitRequest, answer SubmitResponse) and Range (body etcd's RangeRequest, answer its
// RangeResponse, which the frontend relays undecoded); an error answer is the gRPC status the unary RPC would
// give. The frontend (client) and storage (server) both take these from here.
const (
	PipelinePreamble = "CAIRN-STORAGE-PIPELINE/2\n"

	PipelineSubmit uint64 = 1
	PipelineRange  uint64 = 2
)

// PipelineMethodNames names the pipeline's methods, for spans.
var PipelineMethodNames = map[uint64]string{PipelineSubmit: "Submit", PipelineRange: "Range"}
