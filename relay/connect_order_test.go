package relay_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/relaytest"
)

// connectGate is a store whose first QueueLen, once it has counted the
// queue, returns only when counted is closed, and whose first Queued
// (the drain's first read) waits for drain: an agent's connect, and its
// drain, held up as on a loaded machine.
type connectGate struct {
	*boltrelay.Store
	counting      chan struct{} // closed when the first QueueLen has counted
	counted       chan struct{}
	drain         chan struct{}
	lenOnce, once *sync.Once
}

func (s connectGate) QueueLen(channel string) (int, error) {
	n, err := s.Store.QueueLen(channel)
	first := false
	s.lenOnce.Do(func() { first = true })
	if first {
		close(s.counting)
		<-s.counted
	}
	return n, err
}

func (s connectGate) Queued(channel, after string, limit int) ([]*devhook.Delivery, error) {
	s.once.Do(func() { <-s.drain })
	return s.Store.Queued(channel, after, limit)
}

// A run.status delivery queued while an agent connects, after the relay
// counted the channel's empty queue for the agent's hello, is not
// overtaken by the next delivery of its run, sent live once the sender
// has the first one's answer: the relay counts the queue once the agent
// holds the channel, so that every delivery queued from then on kicks
// its connection.
func TestDeliveryQueuedAsTheAgentConnectsIsNotOvertaken(t *testing.T) {
	var st connectGate
	_, hs, _ := relaytest.NewWith(t, func(db *boltrelay.Store) relay.Config {
		st = connectGate{Store: db, counting: make(chan struct{}), counted: make(chan struct{}), drain: make(chan struct{}),
			lenOnce: new(sync.Once), once: new(sync.Once)}
		return relay.Config{Store: st}
	})
	var countedOnce, drainOnce sync.Once
	openCounted := func() { countedOnce.Do(func() { close(st.counted) }) }
	openDrain := func() { drainOnce.Do(func() { close(st.drain) }) }
	t.Cleanup(func() { openCounted(); openDrain() }) // before the Server closes
	cr := relaytest.Open(t, hs)
	conns := make(chan *relayclient.Conn, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		conn, err := relayclient.Dial(ctx, relayclient.DialConfig{RelayURL: hs.URL, Credentials: cr})
		if err != nil {
			t.Errorf("dial: %v", err)
		}
		conns <- conn
	}()
	select {
	case <-st.counting:
	case <-time.After(30 * time.Second):
		t.Fatal("the connect did not count the queue")
	}
	first, second := runBody(t, "r", "first"), runBody(t, "r", "second")
	answers := make(chan int, 2)
	postAsync := func(body string) {
		go func() {
			resp, err := http.Post(cr.PublicURL+"/", "application/json", strings.NewReader(body))
			if err != nil {
				answers <- 0
				return
			}
			resp.Body.Close()
			answers <- resp.StatusCode
		}()
	}
	postAsync(first)
	// Its body read, it is queued (no agent holds the channel yet: 202)
	// or held until the count is done. (The wait only makes the old
	// code's early 202 likely to be seen; the new code passes whatever
	// it lasts.)
	relaytest.WaitFor(t, "the first delivery's body read", func() bool {
		_, m := get(t, hs.URL+"/metrics")
		n, _ := strconv.Atoi(metricValue(m, "devhook_relay_inflight_bytes"))
		return n >= len(first) || len(answers) > 0
	})
	var firstCode int
	select {
	case firstCode = <-answers:
	case <-time.After(2 * time.Second):
	}
	openCounted()
	conn := <-conns
	if conn == nil {
		t.FailNow()
	}
	defer conn.Close()
	var mu sync.Mutex
	var order []string
	got := make(chan struct{}, 4)
	go func() {
		for {
			d, err := conn.Receive()
			if err != nil {
				return
			}
			if d.Queued {
				conn.Ack(d.ID)
			} else {
				conn.Respond(d.ID, http.StatusOK, nil, nil)
			}
			mu.Lock()
			order = append(order, devhook.ParseEvent(d.Body).Status)
			mu.Unlock()
			got <- struct{}{}
		}
	}()
	if firstCode == 0 {
		select {
		case firstCode = <-answers:
		case <-time.After(30 * time.Second):
			t.Fatal("the first delivery was not answered")
		}
	}
	postAsync(second)
	// The second is answered live or queued; the drain reads the queue
	// only then.
	select {
	case <-answers:
	case <-got: // live, ahead of the first
	case <-time.After(30 * time.Second):
		t.Fatal("the second delivery was not answered")
	}
	openDrain()
	relaytest.WaitFor(t, "both deliveries at the agent", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == 2
	})
	mu.Lock()
	defer mu.Unlock()
	if order[0] != "first" || order[1] != "second" {
		t.Fatalf("the agent got run r's deliveries in the order %v (the first answered %d), want first, second", order, firstCode)
	}
}
