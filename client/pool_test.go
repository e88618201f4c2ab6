package client

import (
	"slices"
	"testing"
)

// The default executor holds at most its queue's limit of waiting tasks,
// refuses the next, runs them in order (its ring wrapping and growing on
// the way) and, once closed, refuses more but finishes what it took.
func TestPoolBoundsOrdersAndDrains(t *testing.T) {
	const limit = 3*minRing + 5 // not a power of two: the ring's last size is the limit itself
	p := newPool(1, limit)
	defer p.close()
	var ran []int // written by the one worker; read after done hands over
	done := make(chan int, 4*limit)
	step := func(i int) func() { return func() { ran = append(ran, i); done <- i } }
	block, unblock := make(chan struct{}), make(chan struct{})
	if !p.Execute(func() { close(block); <-unblock }) {
		t.Fatal("the first task was refused")
	}
	<-block // the worker holds the first task: the queue is empty again
	next := 0
	fill := func(k int) {
		for range k {
			if !p.Execute(step(next)) {
				t.Fatalf("task %d refused with %d waiting (limit %d)", next, p.n, limit)
			}
			next++
		}
	}
	fill(limit)
	if p.Execute(step(-1)) {
		t.Fatalf("task %d past the limit of %d was taken", limit+1, limit)
	}
	if len(p.ring) != limit {
		t.Errorf("ring of %d slots for %d tasks", len(p.ring), limit)
	}
	awaitRun := func() {
		for i := range done {
			if i == next-1 {
				return
			}
		}
	}
	close(unblock)
	awaitRun()
	// Wrap the ring: its head is now past its start.
	fill(minRing)
	awaitRun()
	if want := seq(next); !slices.Equal(ran, want) {
		t.Fatalf("ran %v, want %v", ran, want)
	}
	p.close()
	if p.Execute(step(-1)) {
		t.Fatal("a closed pool took a task")
	}
}

// TestPoolCloseFinishesTheQueue: close waits for the tasks already taken.
func TestPoolCloseFinishesTheQueue(t *testing.T) {
	p := newPool(2, 100)
	ran := make(chan int, 100)
	for i := range 100 {
		if !p.Execute(func() { ran <- i }) {
			t.Fatalf("task %d refused", i)
		}
	}
	p.close()
	if len(ran) != 100 {
		t.Fatalf("%d of 100 tasks ran before close returned", len(ran))
	}
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}
