package pace

import (
	"testing"
	"time"
)

func TestStretch(t *testing.T) {
	const base = 500 * time.Millisecond
	type step struct {
		steady  bool
		longest time.Duration // Longest before this call; zero keeps it
		reset   bool          // call Reset instead of Next
		want    time.Duration
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"steady: doubles up to the longest and stays", []step{
			{steady: true, want: 2 * base}, {steady: true, want: 4 * base}, {steady: true, want: 4 * base}}},
		{"a change snaps back to the base", []step{
			{steady: true, want: 2 * base}, {steady: true, want: 4 * base}, {steady: false, want: base},
			{steady: true, want: 2 * base}}},
		{"a longest wait that is no multiple of the base caps the doubling", []step{
			{steady: true, longest: 3 * base, want: 2 * base}, {steady: true, want: 3 * base},
			{steady: true, want: 3 * base}}},
		{"a longer longest lets it stretch further", []step{
			{steady: true, want: 2 * base}, {steady: true, want: 4 * base},
			{steady: true, longest: 8 * base, want: 8 * base}, {steady: true, want: 8 * base}}},
		{"a shorter longest brings a stretched wait down to it", []step{
			{steady: true, longest: 8 * base, want: 2 * base}, {steady: true, want: 4 * base},
			{steady: true, want: 8 * base}, {steady: true, longest: 4 * base, want: 4 * base}}},
		{"a longest below the base never goes under the base", []step{
			{steady: true, longest: base / 2, want: base}, {steady: true, want: base}}},
		{"reset: back to the base", []step{
			{steady: true, want: 2 * base}, {reset: true, want: base}, {steady: true, want: 2 * base}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(base, 4*base)
			if s.Wait() != base || s.Stretched() {
				t.Fatalf("new: wait %v (stretched %v), want %v", s.Wait(), s.Stretched(), base)
			}
			for i, st := range tc.steps {
				if st.longest != 0 {
					s.Longest = st.longest
				}
				var got time.Duration
				if st.reset {
					got = s.Reset()
				} else {
					got = s.Next(st.steady)
				}
				if got != st.want || s.Wait() != st.want || s.Stretched() != (st.want > base) {
					t.Fatalf("step %d: wait %v (in force %v, stretched %v), want %v", i, got, s.Wait(), s.Stretched(), st.want)
				}
			}
		})
	}
}
