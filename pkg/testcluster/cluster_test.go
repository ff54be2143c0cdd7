package testcluster

import (
	"context"
	"testing"
	"time"
)

func TestSmoke(t *testing.T) {
	c := Start(t, Options{})
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "a", "1"); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", resp)
}
