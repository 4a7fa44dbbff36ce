package wire_test

// Each side ignores what it does not know (protocol.go, "Additions
// without a flag day"). A newer relay and a newer agent are simulated by
// encoders that add a field with a tag of 12 or more, and a frame of a
// type this devhook does not know, over a real WebSocket. An older side
// is simulated by strictTags, the decoding rules of the devhooks from
// before the rule, which refuse any tag and type they do not know.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/relaytest"
	"github.com/devhook/devhook/relay/wire"
)

// withFields adds encoded fields at the end of frame's header, as a
// newer encoder would.
func withFields(frame []byte, fields ...byte) []byte {
	n := binary.BigEndian.Uint32(frame)
	out := binary.BigEndian.AppendUint32(nil, n+uint32(len(fields)))
	out = append(out, frame[4:4+n]...)
	out = append(out, fields...)
	return append(out, frame[4+n:]...)
}

// futureFields are fields of tags this devhook does not know, as the rule
// encodes them: a uvarint length and the value.
var futureFields = []byte{
	12, 1, 0x2a, // a number (varint 21)
	40, 3, 'n', 'e', 'w', // a string
	255, 0, // a flag
}

// futureFrame is a frame of a type this devhook does not know, with
// fields and a payload.
func futureFrame() []byte {
	hdr := append([]byte{1, 77, 1, 2, 'i', 'd'}, futureFields...)
	return append(binary.BigEndian.AppendUint32(hdr[:0:0], uint32(len(hdr))), append(hdr, "payload of the future"...)...)
}

// strictTags checks that frame decodes by the rules of the devhooks from
// before "additions without a flag day": types 1 to 4, tags 1 to 11 only.
// rawHello connects to the relay hs as an agent with cr, reads its hello
// as sent, checks that an older agent reads it (strictTags), and closes
// the connection.
func rawHello(t *testing.T, hs *httptest.Server, cr wire.Credentials) wire.Header {
	t.Helper()
	ws := relaytest.DialRaw(t, hs, cr)
	defer ws.Close()
	_, msg, err := ws.ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	strictTags(t, msg)
	hello, _, err := wire.DecodeFrame(msg)
	if err != nil {
		t.Fatal(err)
	}
	return hello
}

func strictTags(t *testing.T, frame []byte) {
	t.Helper()
	n := int(binary.BigEndian.Uint32(frame))
	h := frame[4 : 4+n]
	if h[0] != 1 || h[1] < 1 || h[1] > 4 {
		t.Fatalf("an older side refuses version %d type %d", h[0], h[1])
	}
	b := h[2:]
	str := func() {
		l, w := binary.Uvarint(b)
		if w <= 0 || l > uint64(len(b)-w) {
			t.Fatalf("string runs past the header: % x", h)
		}
		b = b[w+int(l):]
	}
	for len(b) > 0 {
		tag := b[0]
		b = b[1:]
		switch {
		case tag >= 1 && tag <= 7:
			str()
		case tag == 8 || tag == 10:
			_, w := binary.Varint(b)
			b = b[w:]
		case tag == 9:
		case tag == 11:
			str()
			count, w := binary.Uvarint(b)
			b = b[w:]
			for range count {
				str()
			}
		default:
			t.Fatalf("an older side refuses tag %d in % x", tag, h)
		}
	}
}

func TestDecodeFrameSkipsWhatItDoesNotKnow(t *testing.T) {
	frame, err := wire.AppendFrame(nil, &wire.Header{Type: wire.TypeResponse, ID: "d1", Status: 201,
		Header: http.Header{"X-A": {"1"}}}, []byte("body"))
	if err != nil {
		t.Fatal(err)
	}
	h, body, err := wire.DecodeFrame(withFields(frame, futureFields...))
	if err != nil || h.Type != wire.TypeResponse || h.ID != "d1" || h.Status != 201 || h.Header.Get("X-A") != "1" || string(body) != "body" {
		t.Fatalf("with fields of the future: %+v %q %v", h, body, err)
	}
	h, body, err = wire.DecodeFrame(futureFrame())
	if err != nil || h.Type != "" || string(body) != "payload of the future" {
		t.Fatalf("a frame of the future: %+v %q %v, want an empty Type to ignore", h, body, err)
	}
	for name, fields := range map[string][]byte{
		"no length":         {40},
		"value past header": {40, 9, 'x'},
	} {
		if _, _, err := wire.DecodeFrame(withFields(frame, fields...)); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// fakeRelay serves one agent connection with serve, as a relay of another
// devhook version would.
func fakeRelay(t *testing.T, serve func(ws *websocket.Conn)) (*httptest.Server, wire.Credentials) {
	t.Helper()
	up := websocket.Upgrader{}
	done := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer close(done)
		defer ws.Close()
		serve(ws)
	}))
	t.Cleanup(func() {
		hs.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the fake relay's handler did not end")
		}
	})
	return hs, wire.Credentials{Channel: "0123456789abcdef0123456789abcdef", Token: "tok"}
}

func writeFrame(t *testing.T, ws *websocket.Conn, frame []byte) {
	t.Helper()
	if err := ws.WriteMessage(websocket.BinaryMessage, frame); err != nil {
		t.Error(err)
	}
}

func encode(t *testing.T, h *wire.Header, payload []byte) []byte {
	t.Helper()
	frame, err := wire.AppendFrame(nil, h, payload)
	if err != nil {
		t.Fatal(err)
	}
	return frame
}

// This devhook's agent side, with a newer relay: the hello, a delivery and
// a frame of unknown type carry what it does not know; it gets the
// delivery and answers in frames an older relay decodes.
func TestAgentWithANewerRelay(t *testing.T) {
	answers := make(chan wire.Header, 2)
	hs, cr := fakeRelay(t, func(ws *websocket.Conn) {
		writeFrame(t, ws, withFields(encode(t, &wire.Header{Type: wire.TypeHello, Channel: "c", PublicURL: "https://x/c/c", Status: 1,
			Header: http.Header{wire.HelloMaxBody: {"1048576"}, "Devhook-Future-Setting": {"on"}}}, nil), futureFields...))
		writeFrame(t, ws, futureFrame())
		writeFrame(t, ws, withFields(encode(t, &wire.Header{Type: wire.TypeDeliver, ID: "d1", Method: "POST", Path: "/p", Queued: true}, []byte("hello")), futureFields...))
		for range 2 {
			_, msg, err := ws.ReadMessage()
			if err != nil {
				t.Error(err)
				return
			}
			strictTags(t, msg)
			h, _, err := wire.DecodeFrame(msg)
			if err != nil {
				t.Error(err)
				return
			}
			answers <- h
		}
		ws.ReadMessage() // until the agent closes
	})
	c := relaytest.DialWith(t, relayclient.DialConfig{RelayURL: hs.URL, Credentials: cr})
	if c.PublicURL() != "https://x/c/c" || c.Queued() != 1 || c.MaxBody() != 1<<20 {
		t.Fatalf("hello: public URL %q, queued %d, max body %d", c.PublicURL(), c.Queued(), c.MaxBody())
	}
	d := relaytest.Receive(t, c, 10*time.Second)
	if d.ID != "d1" || d.Path != "/p" || string(d.Body) != "hello" || !d.Queued {
		t.Fatalf("delivery %+v", d)
	}
	if err := c.Respond(d.ID, 200, http.Header{"X-R": {"1"}}, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if err := c.Ack(d.ID); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{wire.TypeResponse, wire.TypeAck} {
		select {
		case h := <-answers:
			if h.Type != want || h.ID != "d1" {
				t.Fatalf("the relay got %+v, want %s of d1", h, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s", want)
		}
	}
}

// This devhook's agent side, with an older relay: a hello that does not
// announce a largest body means 10 MiB; one that does is believed, for
// deliveries larger than 10 MiB.
func TestAgentTakesTheRelaysMaxBody(t *testing.T) {
	big := bytes.Repeat([]byte("b"), wire.DefaultMaxBody+1<<20)
	for _, tt := range []struct {
		name     string
		announce string // "" = an older relay
		want     int64
	}{
		{"older relay", "", wire.DefaultMaxBody},
		{"16 MiB", strconv.Itoa(16 << 20), 16 << 20},
		{"nonsense", "-5", wire.DefaultMaxBody},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hs, cr := fakeRelay(t, func(ws *websocket.Conn) {
				hello := &wire.Header{Type: wire.TypeHello, Channel: "c", PublicURL: "https://x/c/c"}
				if tt.announce != "" {
					hello.Header = http.Header{wire.HelloMaxBody: {tt.announce}}
				}
				writeFrame(t, ws, encode(t, hello, nil))
				// An agent that takes less drops the connection while
				// this is written.
				ws.WriteMessage(websocket.BinaryMessage, encode(t, &wire.Header{Type: wire.TypeDeliver, ID: "big", Method: "POST", Path: "/"}, big))
				ws.ReadMessage()
			})
			c := relaytest.DialWith(t, relayclient.DialConfig{RelayURL: hs.URL, Credentials: cr})
			if c.MaxBody() != tt.want {
				t.Fatalf("max body %d, want %d", c.MaxBody(), tt.want)
			}
			d, err := c.Receive()
			switch {
			case tt.want > int64(len(big)):
				if err != nil || !bytes.Equal(d.Body, big) {
					t.Fatalf("an 11 MiB delivery within the relay's 16 MiB: %v", err)
				}
			case err == nil:
				t.Fatalf("an 11 MiB delivery over %d bytes was read", tt.want)
			}
		})
	}
}

// This devhook's relay, with a newer agent: frames of unknown type and
// fields it does not know are ignored; the agent's answers and acks
// count. Its hello decodes by the rules of older agents.
func TestRelayWithANewerAgent(t *testing.T) {
	_, hs, db := relaytest.New(t, relay.Config{ResponseTimeout: 10 * time.Second, MaxBody: 16 << 20})
	cr := relaytest.Open(t, hs)
	queued := &devhook.Delivery{ID: "0190a000-0000-7000-8000-000000000001", Method: "POST", Path: "/q", Body: []byte("queued")}
	if err := db.Enqueue(cr.Channel, queued); err != nil {
		t.Fatal(err)
	}
	ws := relaytest.DialRaw(t, hs, cr)
	_, msg, err := ws.ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	strictTags(t, msg) // an older agent reads the hello
	hello, _, err := wire.DecodeFrame(msg)
	if err != nil || hello.Type != wire.TypeHello || hello.Header.Get(wire.HelloMaxBody) != strconv.Itoa(16<<20) || hello.Status != 1 {
		t.Fatalf("hello %+v, %v", hello, err)
	}
	read := func() wire.Header {
		t.Helper()
		_, msg, err := ws.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		h, _, err := wire.DecodeFrame(msg)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	if h := read(); h.Type != wire.TypeDeliver || h.ID != queued.ID {
		t.Fatalf("got %+v, want the queued delivery", h)
	}
	writeFrame(t, ws, futureFrame())
	writeFrame(t, ws, withFields(encode(t, &wire.Header{Type: wire.TypeResponse, ID: queued.ID, Status: 200}, nil), futureFields...))
	writeFrame(t, ws, withFields(encode(t, &wire.Header{Type: wire.TypeAck, ID: queued.ID}, nil), futureFields...))
	relaytest.WaitFor(t, "the acked delivery to leave the queue", func() bool { n, _ := db.QueueLen(cr.Channel); return n == 0 })

	type result struct {
		status int
		body   string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := http.Post(cr.PublicURL+"/live", "text/plain", strings.NewReader("live"))
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		done <- result{status: resp.StatusCode, body: string(b)}
	}()
	h := read()
	if h.Type != wire.TypeDeliver || h.Path != "/live" {
		t.Fatalf("got %+v, want the live delivery", h)
	}
	writeFrame(t, ws, futureFrame())
	writeFrame(t, ws, withFields(encode(t, &wire.Header{Type: wire.TypeResponse, ID: h.ID, Status: 201}, []byte("made")), futureFields...))
	select {
	case r := <-done:
		if r.err != nil || r.status != 201 || r.body != "made" {
			t.Fatalf("sender got %d %q %v, want the agent's 201 made", r.status, r.body, r.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the sender got no answer")
	}
}

func ExampleDecodeFrame_unknownType() {
	frame := []byte{0, 0, 0, 2, 1, 77} // version 1, a type from the future
	h, _, err := wire.DecodeFrame(frame)
	fmt.Printf("type %q, error %v\n", h.Type, err)
	// Output: type "", error <nil>
}
