package emulator

// A devhook extension of the trigger: POST /v1/events/trigger with a
// scenario (docs/SCENARIOS.md) sends its deliveries, rather than one
// sample event, to every webhook of the account that subscribes to
// run.status. The service itself has no such field: a client that sends
// one to it gets a sample event, and an answer without "deliveries".
//
//	POST /v1/events/trigger
//	{"event_type": "run.status", "scenario": {"devhook_scenario": 1, …}, "speed": 1}
//	→ 202 {"event_type": "run.status", "webhooks": 2, "deliveries": 3}
//
// The scenario is checked whole before anything is sent: a file of
// another version, a body that is not what its encoding says or a
// delivery that is not a POST is a 400 that names the delivery. Then each
// delivery goes as the service sends one: a POST of its body, byte for
// byte, to each webhook's endpoint_url (the scenario's path and query are
// not used), with the headers it was recorded with and a service-signature
// made afresh with that webhook's secret. Each waits its offset_ms
// divided by speed (default 1; 0: no waiting) after the first, and the
// first attempts of the one before; failed attempts are retried and every
// attempt is a conversation, as for any delivery. A request with a
// scenario may be as large as a run's input (Config.MaxInputBytes); any
// other trigger has the limit of every call (Config.MaxBodyBytes).

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/scenario"
)

func hasScenario(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

func (e *Emulator) triggerScenario(w http.ResponseWriter, c *call, raw json.RawMessage, speed *float64) error {
	s, err := scenario.Parse("in the request", raw)
	if err != nil {
		return errorf(http.StatusBadRequest, "%w", err)
	}
	for i, d := range s.Deliveries {
		if d.Method != http.MethodPost {
			return errorf(http.StatusBadRequest, "scenario in the request: delivery %d is a %s; the service sends only POST", i+1, d.Method)
		}
	}
	pace := 1.0
	if speed != nil {
		if *speed < 0 {
			return errorf(http.StatusBadRequest, "speed %g: give a positive number, or 0 for no waiting", *speed)
		}
		pace = *speed
	}
	e.mu.Lock()
	hooks := e.subscribers(c.account)
	e.mu.Unlock()
	e.goroutine(func(ctx context.Context) { e.playScenario(ctx, c.account, hooks, s, pace) })
	writeJSON(w, http.StatusAccepted, map[string]any{"event_type": devhook.EventRunStatus, "webhooks": len(hooks), "deliveries": len(s.Deliveries)})
	return nil
}

// playScenario sends s's deliveries in order, each at its offset divided
// by speed (0: at once) and after the first attempts of the one before.
func (e *Emulator) playScenario(ctx context.Context, account string, hooks []string, s *scenario.Scenario, speed float64) {
	start := time.Now()
	for _, d := range s.Deliveries {
		if speed > 0 {
			due := start.Add(time.Duration(float64(d.OffsetMS) * float64(time.Millisecond) / speed))
			if wait := time.Until(due); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
		}
		header := d.Header
		if header == nil {
			header = http.Header{}
		}
		e.sendAll(ctx, account, hooks, outgoing{body: d.Body, header: header})
	}
}
