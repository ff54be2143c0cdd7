package frontend

import (
	"testing"
	"time"
)

func TestProbePace(t *testing.T) {
	idle := []probeMark{{healthy: true, leader: 1, term: 2, index: 10}}
	moved := []probeMark{{healthy: true, leader: 1, term: 2, index: 11}}
	down := []probeMark{{healthy: false, leader: 1, term: 2, index: 11}}
	const base = 500 * time.Millisecond
	pp := newProbePace(base)
	for i, step := range []struct {
		name  string
		marks []probeMark
		asked bool
		want  time.Duration
	}{
		{"first round differs from nothing", idle, false, base},
		{"unchanged: doubles", idle, false, 2 * base},
		{"unchanged again", idle, false, 4 * base},
		{"capped", idle, false, idleProbeFactor * base},
		{"a moved index: back to the base", moved, false, base},
		{"unchanged after the move", moved, false, 2 * base},
		{"a replica down", down, false, base},
		{"unchanged while down", down, false, 2 * base},
		{"asked for after a failed call", down, true, base},
	} {
		if got := pp.next(step.marks, step.asked); got != step.want {
			t.Fatalf("step %d (%s): wait %v, want %v", i, step.name, got, step.want)
		}
	}
}
