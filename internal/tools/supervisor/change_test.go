package supervisor

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

func TestFinalExitIsNotRestarted(t *testing.T) {
	finished := make(chan string, 1)
	done := childSpec(t, "done", "exit-7")
	done.FinalExitCodes = []int{7}
	done.Ready = nil
	sup := startSupervisor(t, Config{
		Children:   []ChildSpec{childSpec(t, "a", "sleep"), done},
		OnFinished: func(child string, code int) { finished <- child },
	})
	select {
	case name := <-finished:
		if name != "done" {
			t.Fatalf("OnFinished(%q), want done", name)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnFinished was not called")
	}
	// The supervise loop calls OnFinished as its last act, so no relaunch can follow it.
	if st, _ := sup.Child("done"); st.State != StateFinished || st.Restarts != 0 || st.PID != 0 {
		t.Fatalf("finished child: %+v", st)
	}
}

func TestAddAndRemoveWhileRunning(t *testing.T) {
	stackFile := filepath.Join(t.TempDir(), "stack.json")
	sup := startSupervisor(t, Config{Children: []ChildSpec{childSpec(t, "a", "sleep")}, StackFile: stackFile})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	if err := sup.Add(ctx, childSpec(t, "a", "sleep")); err == nil {
		t.Fatal("adding a second child named a was accepted")
	}
	b, c := childSpec(t, "b", "sleep", "X=1"), childSpec(t, "c", "sleep")
	c.DependsOn = []string{"a", "b"}
	if err := sup.Add(ctx, b, c); err != nil {
		t.Fatalf("Add: %v", err)
	}
	added, _ := sup.Child("c")
	if added.State != StateRunning || !added.Ready || !alive(added.PID) {
		t.Fatalf("added child: %+v", added)
	}

	// A new command line is for the next launch: the running process is left alone.
	respecced := childSpec(t, "a", "sleep", "RESPECCED=1")
	sup.Respec(respecced)
	if st := mustChild(t, sup, "a"); !slices.Equal(st.Argv, respecced.Argv) || !alive(st.PID) {
		t.Fatalf("after Respec: %+v", st)
	}
	removedPID := mustChild(t, sup, "b").PID
	if err := sup.Remove(ctx, "b"); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	waittest.Until(t, 5*time.Second, 10*time.Millisecond, "the removed child's process to be gone", func() bool {
		return !alive(removedPID)
	})
	if !alive(mustChild(t, sup, "a").PID) || !alive(added.PID) {
		t.Fatal("removing b stopped another child")
	}
	if _, ok := sup.Child("b"); ok {
		t.Fatal("the removed child is still reported")
	}
	stack, err := ReadStack(stackFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := stack.Child("b"); ok || len(stack.Children) != 2 {
		t.Fatalf("stack file after Remove: %+v", stack.Children)
	}
	if err := sup.Remove(ctx, "b"); err == nil {
		t.Fatal("removing an unknown child was accepted")
	}
	// Stop still stops the dependents first, and every child.
	if err := sup.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if alive(added.PID) {
		t.Fatal("Stop left an added child running")
	}
}

func mustChild(t *testing.T, sup *Supervisor, name string) ChildStatus {
	t.Helper()
	st, ok := sup.Child(name)
	if !ok {
		t.Fatalf("no child %q", name)
	}
	return st
}
