package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// recordType says what a record's payload holds.
type recordType uint8

const (
	recordMetadata  recordType = 1 // payload: the caller's metadata bytes
	recordEntry     recordType = 2 // payload: u64 index | u64 term | u8 entry type | data
	recordHardState recordType = 3 // payload: u64 term | u64 vote | u64 commit
	recordSnapshot  recordType = 4 // payload: u8 flags | marshalled raftpb.Snapshot
)

const (
	headerSize       = 9 // u32 length | u32 crc | u8 type
	entryHeaderSize  = 17
	hardStateSize    = 24
	maxPayloadSize   = 1 << 30
	snapshotDiscards = 1 // flag: the snapshot replaced the whole log (received from a leader)
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// errBrokenRecord means the bytes at an offset are not a whole, valid record.
var errBrokenRecord = errors.New("broken record")

// record is one decoded record; payload aliases the segment's bytes.
type record struct {
	typ     recordType
	payload []byte
	off     int // the record's offset in its segment (set by scanSegment)
}

// appendRecord frames payload as a record of type typ onto buf.
func appendRecord(buf []byte, typ recordType, payload []byte) []byte {
	var header [headerSize]byte
	binary.LittleEndian.PutUint32(header[0:4], uint32(len(payload)))
	crc := crc32.Update(0, crcTable, []byte{byte(typ)})
	crc = crc32.Update(crc, crcTable, payload)
	binary.LittleEndian.PutUint32(header[4:8], crc)
	header[8] = byte(typ)
	buf = append(buf, header[:]...)
	return append(buf, payload...)
}

// entryRecordsSize is the number of bytes appendEntryRecord adds for ents.
func entryRecordsSize(ents []*raftpb.Entry) int {
	size := 0
	for _, e := range ents {
		size += headerSize + entryHeaderSize + len(e.GetData())
	}
	return size
}

// appendEntryRecord frames an entry without building its payload separately.
func appendEntryRecord(buf []byte, e *raftpb.Entry) []byte {
	start := len(buf)
	buf = append(buf, make([]byte, headerSize+entryHeaderSize)...)
	payload := buf[start+headerSize:]
	binary.LittleEndian.PutUint64(payload[0:8], e.GetIndex())
	binary.LittleEndian.PutUint64(payload[8:16], e.GetTerm())
	payload[16] = byte(e.GetType())
	buf = append(buf, e.GetData()...)
	payload = buf[start+headerSize:]
	binary.LittleEndian.PutUint32(buf[start:start+4], uint32(len(payload)))
	// The CRC covers the type byte and the payload, which follow each other in buf: no slice of the type
	// byte alone (it escaped, one allocation a record).
	buf[start+8] = byte(recordEntry)
	binary.LittleEndian.PutUint32(buf[start+4:start+8], crc32.Checksum(buf[start+8:], crcTable))
	return buf
}

// decodeRecord reads the record at off in data. It returns the record and the offset after it, or
// errBrokenRecord when the bytes there are cut off or fail the CRC.
func decodeRecord(data []byte, off int) (record, int, error) {
	if len(data)-off < headerSize {
		return record{}, off, errBrokenRecord
	}
	size := int(binary.LittleEndian.Uint32(data[off : off+4]))
	wantCRC := binary.LittleEndian.Uint32(data[off+4 : off+8])
	typ := recordType(data[off+8])
	end := off + headerSize + size
	if size > maxPayloadSize || end > len(data) || typ < recordMetadata || typ > recordSnapshot {
		return record{}, off, errBrokenRecord
	}
	crc := crc32.Update(0, crcTable, data[off+8:end])
	if crc != wantCRC {
		return record{}, off, errBrokenRecord
	}
	return record{typ: typ, payload: data[off+headerSize : end]}, end, nil
}

// decodeEntry decodes an entry record's payload into an entry with its own copy of the data.
func decodeEntry(payload []byte) (*raftpb.Entry, error) {
	e, err := aliasEntry(payload)
	if err == nil && len(e.Data) > 0 {
		e.Data = append([]byte(nil), e.Data...)
	}
	return e, err
}

// aliasEntry decodes an entry record's payload into an entry whose data aliases the payload.
func aliasEntry(payload []byte) (*raftpb.Entry, error) {
	if len(payload) < entryHeaderSize {
		return nil, fmt.Errorf("entry record of %d bytes is shorter than %d", len(payload), entryHeaderSize)
	}
	e := &raftpb.Entry{
		Index: new(binary.LittleEndian.Uint64(payload[0:8])),
		Term:  new(binary.LittleEndian.Uint64(payload[8:16])),
		Type:  raftpb.EntryType(payload[16]).Enum(),
	}
	if len(payload) > entryHeaderSize {
		e.Data = payload[entryHeaderSize:len(payload):len(payload)]
	}
	return e, nil
}

func encodeHardState(hs *raftpb.HardState) []byte {
	payload := make([]byte, hardStateSize)
	binary.LittleEndian.PutUint64(payload[0:8], hs.GetTerm())
	binary.LittleEndian.PutUint64(payload[8:16], hs.GetVote())
	binary.LittleEndian.PutUint64(payload[16:24], hs.GetCommit())
	return payload
}

func decodeHardState(payload []byte) (*raftpb.HardState, error) {
	if len(payload) != hardStateSize {
		return nil, fmt.Errorf("hard state record of %d bytes, want %d", len(payload), hardStateSize)
	}
	return &raftpb.HardState{
		Term:   new(binary.LittleEndian.Uint64(payload[0:8])),
		Vote:   new(binary.LittleEndian.Uint64(payload[8:16])),
		Commit: new(binary.LittleEndian.Uint64(payload[16:24])),
	}, nil
}

func encodeSnapshot(snap *raftpb.Snapshot, discardsLog bool) ([]byte, error) {
	body, err := proto.Marshal(snap)
	if err != nil {
		return nil, fmt.Errorf("marshal snapshot at index %d: %w", snap.GetMetadata().GetIndex(), err)
	}
	flags := byte(0)
	if discardsLog {
		flags = snapshotDiscards
	}
	return append([]byte{flags}, body...), nil
}

func decodeSnapshot(payload []byte) (snap *raftpb.Snapshot, discardsLog bool, err error) {
	if len(payload) < 1 {
		return nil, false, errors.New("empty snapshot record")
	}
	snap = &raftpb.Snapshot{}
	if err := proto.Unmarshal(payload[1:], snap); err != nil {
		return nil, false, fmt.Errorf("unmarshal snapshot: %w", err)
	}
	return raftpb.EnsureSnapshot(snap), payload[0]&snapshotDiscards != 0, nil
}
