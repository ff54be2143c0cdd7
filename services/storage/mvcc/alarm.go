package mvcc

import (
	"fmt"
	"sort"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// Alarms are kept as in etcd's alarm store: the key is the marshalled AlarmMember, the value empty.

func (s *Store) restoreAlarms(b *bolt.Bucket) error {
	return b.ForEach(func(k, _ []byte) error {
		m := &pb.AlarmMember{}
		if err := proto.Unmarshal(k, m); err != nil {
			return fmt.Errorf("decode alarm: %w", err)
		}
		s.alarms = append(s.alarms, m)
		return nil
	})
}

func (s *Store) alarmActiveLocked(t pb.AlarmType) bool {
	for _, a := range s.alarms {
		if a.Alarm == t {
			return true
		}
	}
	return false
}

// alarmsLocked returns the active alarms of type t (every alarm for NONE), ordered by member and type.
func (s *Store) alarmsLocked(t pb.AlarmType) []*pb.AlarmMember {
	var out []*pb.AlarmMember
	for _, a := range s.alarms {
		if t == pb.AlarmType_NONE || a.Alarm == t {
			out = append(out, &pb.AlarmMember{MemberID: a.MemberID, Alarm: a.Alarm})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].MemberID != out[j].MemberID {
			return out[i].MemberID < out[j].MemberID
		}
		return out[i].Alarm < out[j].Alarm
	})
	return out
}

// Alarms returns the active alarms of type t (every alarm for NONE).
func (s *Store) Alarms(t pb.AlarmType) []*pb.AlarmMember {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.alarmsLocked(t)
}

// applyAlarm is etcd's: ACTIVATE answers with the alarm (also when it was already active), DEACTIVATE with the
// alarm it removed, if any; GET lists.
func (s *Store) applyAlarm(r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	resp := &pb.AlarmResponse{Header: &pb.ResponseHeader{Revision: s.currentRev}}
	m := &pb.AlarmMember{MemberID: r.MemberID, Alarm: r.Alarm}
	switch r.Action {
	case pb.AlarmRequest_GET:
		resp.Alarms = s.alarmsLocked(r.Alarm)
	case pb.AlarmRequest_ACTIVATE:
		if r.Alarm == pb.AlarmType_NONE {
			break
		}
		resp.Alarms = []*pb.AlarmMember{m}
		if s.findAlarm(m) >= 0 {
			break
		}
		if err := s.writeAlarm(m, true); err != nil {
			return nil, err
		}
		s.alarms = append(s.alarms, m)
	case pb.AlarmRequest_DEACTIVATE:
		i := s.findAlarm(m)
		if i < 0 {
			break
		}
		if err := s.writeAlarm(m, false); err != nil {
			return nil, err
		}
		s.alarms = append(s.alarms[:i:i], s.alarms[i+1:]...)
		resp.Alarms = []*pb.AlarmMember{m}
	}
	return resp, nil
}

func (s *Store) findAlarm(m *pb.AlarmMember) int {
	for i, a := range s.alarms {
		if a.MemberID == m.MemberID && a.Alarm == m.Alarm {
			return i
		}
	}
	return -1
}

func (s *Store) writeAlarm(m *pb.AlarmMember, active bool) error {
	key, err := proto.Marshal(m)
	if err != nil {
		return fmt.Errorf("marshal alarm: %w", err)
	}
	b := s.wtx.Bucket(bucketAlarm)
	if active {
		err = b.Put(key, []byte{})
	} else {
		err = b.Delete(key)
	}
	if err != nil {
		return fmt.Errorf("write alarm %v member %x: %w", m.Alarm, m.MemberID, err)
	}
	return nil
}
