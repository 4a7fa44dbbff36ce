package wire

import (
	"fmt"
	"net/http"

	"github.com/devhook/devhook"
)

// EncodeDelivery returns d, body included, in the protocol's deliver frame
// encoding: for a Store or Router that keeps or passes deliveries as bytes
// (the NATS cluster's queue and its request/reply between relays).
// Answer is an agent's response to a live delivery.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
}

func EncodeDelivery(d *devhook.Delivery) ([]byte, error) {
	return AppendFrame(make([]byte, 0, len(d.Body)+512), DeliverHeader(d), d.Body)
}

// DecodeDelivery reverses EncodeDelivery for a delivery of channel. The
// body aliases b.
func DecodeDelivery(channel string, b []byte) (*devhook.Delivery, error) {
	h, body, err := DecodeFrame(b)
	if err != nil {
		return nil, err
	}
	if h.Type != TypeDeliver {
		return nil, fmt.Errorf("%w: a %q frame where a delivery was expected", ErrMalformed, h.Type)
	}
	d := DeliveryOf(&h, channel, body)
	if d.Body == nil {
		d.Body = []byte{}
	}
	return d, nil
}

// EncodeAnswer returns the agent's answer to delivery id as a response
// frame.
func EncodeAnswer(id string, a *Answer) ([]byte, error) {
	return AppendFrame(make([]byte, 0, len(a.Body)+512), &Header{Type: TypeResponse, ID: id, Status: a.Status, Header: a.Header}, a.Body)
}

// DecodeAnswer reverses EncodeAnswer. The body aliases b.
func DecodeAnswer(b []byte) (*Answer, error) {
	h, body, err := DecodeFrame(b)
	if err != nil {
		return nil, err
	}
	if h.Type != TypeResponse {
		return nil, fmt.Errorf("%w: a %q frame where an answer was expected", ErrMalformed, h.Type)
	}
	return &Answer{Status: h.Status, Header: h.Header, Body: body}, nil
}
