package pace

import "time"

// Stretch is the wait of one periodic job. Base is the period while things change; Longest bounds the
// stretched wait (it may be changed between calls to Next: a job that matters less for a while waits longer).
type Stretch struct {
	Base    time.Duration
	Longest time.Duration
	wait    time.Duration // the wait in force; zero means Base
}

// New returns a Stretch at its base period that stretches up to longest.
func New(base, longest time.Duration) *Stretch {
	return &Stretch{Base: base, Longest: longest}
}

// Next returns the wait before the next run, after a run that found what the job watches steady (unchanged,
// answering as before) or not: Base after a change, otherwise twice the wait in force, up to Longest.
func (s *Stretch) Next(steady bool) time.Duration {
	if !steady {
		s.wait = s.Base
	} else {
		s.wait = max(min(2*s.Wait(), s.Longest), s.Base)
	}
	return s.wait
}

// Reset brings the wait back to Base (something outside the job's own runs changed) and returns it.
func (s *Stretch) Reset() time.Duration {
	s.wait = s.Base
	return s.wait
}

// Wait returns the wait in force: Base before the first Next, then what the last Next or Reset returned.
func (s *Stretch) Wait() time.Duration {
	if s.wait == 0 {
		return s.Base
	}
	return s.wait
}

// Stretched reports whether the wait in force is longer than Base.
func (s *Stretch) Stretched() bool { return s.Wait() > s.Base }
