package consensuspb

// Preambles of the framed links on a consensus member's Consensus port; storage (client) and consensus
// (server) both take them from here.
const (
	// ProposePreamble opens the propose link, a link of calls (internal/link): Propose (body: the entry's data,
	// byte for byte; empty answer once raft accepted the proposal, or its refusal) and ReadIndex (empty body;
	// answer: the read index as a uvarint).
	ProposePreamble = "CAIRN-CONSENSUS-PROPOSE/2\n"
	// CommittedPreamble opens the committed link, a stream: one CommittedRequest frame in, CommittedResponse
	// frames out.
	CommittedPreamble = "CAIRN-CONSENSUS-COMMITTED/1\n"

	ProposeMethod   uint64 = 1
	ReadIndexMethod uint64 = 2
)

// ProposeMethodNames names the propose link's methods, for spans.
var ProposeMethodNames = map[uint64]string{ProposeMethod: "Propose", ReadIndexMethod: "ReadIndex"}
