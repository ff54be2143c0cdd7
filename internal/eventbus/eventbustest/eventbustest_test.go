package eventbustest

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
)

// TestBusInBubble: in a bubble, messages pass between two clients, and a minute of fake time passes at once
// while the bus is idle.
func TestBusInBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bus := Start(t)
		sub, pub := bus.Connect(t, "sub"), bus.Connect(t, "pub")
		got := make(chan string, 1)
		if _, err := sub.Subscribe("subject", func(m *nats.Msg) { got <- string(m.Data) }); err != nil {
			t.Fatal(err)
		}
		Flush(t, sub)
		start := time.Now()
		time.Sleep(time.Minute)
		if err := pub.Publish("subject", []byte("after a minute")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case msg := <-got:
			if msg != "after a minute" || time.Since(start) != time.Minute {
				t.Fatalf("got %q %v after the start, want %q exactly a minute after", msg, time.Since(start), "after a minute")
			}
		default:
			t.Fatal("the message had not arrived when the bubble went idle")
		}
	})
}
