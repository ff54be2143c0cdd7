package seal

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// reportingKMS is a Provider and PrimaryReporter held in memory: its "wrapped" data keys are the keys themselves,
// and the first PrimaryKeyID call waits until released (a KMS slow to answer).
type reportingKMS struct {
	mu      sync.Mutex
	primary string
	asked   chan struct{} // closed when the first PrimaryKeyID call has started
	release chan struct{} // the first PrimaryKeyID call answers once this is closed
	calls   int
}

func (f *reportingKMS) Name() string { return "fake-kms" }
func (f *reportingKMS) Close() error { return nil }

func (f *reportingKMS) Wrap(_ context.Context, dataKey []byte) (string, []byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.primary, append([]byte(nil), dataKey...), nil
}

func (f *reportingKMS) Unwrap(_ context.Context, _ string, wrapped []byte) ([]byte, error) {
	return wrapped, nil
}

func (f *reportingKMS) PrimaryKeyID(context.Context) (string, error) {
	f.mu.Lock()
	f.calls++
	first := f.calls == 1
	f.mu.Unlock()
	if first { // answers late, past the caller's deadline
		close(f.asked)
		<-f.release
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.primary, nil
}

// TestPrimaryCheckHoldsNoSeal: while a KMS is slow to report its primary key, other seals go on under the current
// data key; once it reports a new primary, the seal that asked, and those after it, use a data key wrapped under it.
func TestPrimaryCheckHoldsNoSeal(t *testing.T) {
	ctx := context.Background()
	kms := &reportingKMS{primary: "v1", asked: make(chan struct{}), release: make(chan struct{})}
	cfg, err := ParseConfig([]byte(`kind: EncryptionConfiguration
resources: [{prefixes: ["/"], providers: [{kms: {name: fake-kms, command: /nonexistent}}]}]`))
	if err != nil {
		t.Fatal(err)
	}
	open := func(KMSConfig, *slog.Logger) (Provider, error) { return kms, nil }
	k, err := NewKeyring(ctx, cfg, Options{Logger: slog.New(slog.DiscardHandler), PrimaryCheck: time.Nanosecond}, open)
	if err != nil {
		t.Fatal(err)
	}
	sealedByAsker := make(chan []byte, 1)
	go func() { // the seal that finds the check due asks the KMS, which does not answer yet
		sealed, err := k.Seal(ctx, []byte("/a"), []byte("asker"))
		if err != nil {
			t.Error(err)
		}
		sealedByAsker <- sealed
	}()
	<-kms.asked
	kms.mu.Lock()
	kms.primary = "v2" // rotated in the KMS while the check is under way
	kms.mu.Unlock()

	// Other seals (the check is due again for each: PrimaryCheck 1ns) finish meanwhile.
	othersDone := make(chan error, 1)
	go func() {
		for range 3 {
			if _, err := k.Seal(ctx, []byte("/b"), []byte("other")); err != nil {
				othersDone <- err
				return
			}
		}
		othersDone <- nil
	}()
	select {
	case err := <-othersDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(kms.release)
		t.Fatal("seals waited on another seal's primary-key check")
	}
	close(kms.release)
	select {
	case sealed := <-sealedByAsker:
		if _, id := Describe(sealed); id != "v2" {
			t.Fatalf("the seal that saw the primary move sealed under %q, want v2", id)
		}
		if got, err := k.Open(ctx, []byte("/a"), sealed); err != nil || string(got) != "asker" {
			t.Fatalf("Open = %q, %v", got, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the seal that asked for the primary key never finished")
	}
	sealed, err := k.Seal(ctx, []byte("/c"), []byte("after"))
	if err != nil {
		t.Fatal(err)
	}
	if _, id := Describe(sealed); id != "v2" {
		t.Fatalf("seal after the rotation under %q, want v2", id)
	}
}
