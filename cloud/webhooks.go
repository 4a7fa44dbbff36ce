package cloud

import (
	"context"
	"encoding/json"
	"net/http"
)

// EventRunStatus is the only event type.
const EventRunStatus = "run.status"

// WebhookInput is what create and update send: all four fields.
type WebhookInput struct {
	ID          string   `json:"id"`
	EventTypes  []string `json:"event_types"`
	EndpointURL string   `json:"endpoint_url"`
	Description string   `json:"description"`
}

// Webhook is a webhook record. Raw is the answer as the service sent it.
type Webhook struct {
	ID          string          `json:"id"`
	EventTypes  []string        `json:"event_types"`
	EndpointURL string          `json:"endpoint_url"`
	Description string          `json:"description"`
	CreatedAt   string          `json:"created_at,omitempty"`
	UpdatedAt   string          `json:"updated_at,omitempty"`
	Raw         json.RawMessage `json:"-"`
}

// Input returns the writable fields of w.
func (w Webhook) Input() WebhookInput {
	return WebhookInput{ID: w.ID, EventTypes: w.EventTypes, EndpointURL: w.EndpointURL, Description: w.Description}
}

// Webhooks is the list answer.
type Webhooks struct {
	Items []Webhook       `json:"items"`
	Raw   json.RawMessage `json:"-"`
}

// CreateWebhook creates a webhook. The service answers with its record
// (or at least its id).
func (c *Client) CreateWebhook(ctx context.Context, in WebhookInput) (Webhook, error) {
	if in.EventTypes == nil {
		in.EventTypes = []string{EventRunStatus}
	}
	var w Webhook
	raw, err := c.call(ctx, http.MethodPost, "/v1/webhooks", nil, in, &w)
	if err != nil {
		return w, explain(err, http.StatusConflict, "that id is taken: choose another, or change it with: devhook webhooks update ID")
	}
	w.Raw = raw
	if w.ID == "" {
		w.ID = in.ID
	}
	if w.EndpointURL == "" {
		w.EventTypes, w.EndpointURL, w.Description = in.EventTypes, in.EndpointURL, in.Description
	}
	return w, nil
}

// ListWebhooks lists the webhooks of the account (or team).
func (c *Client) ListWebhooks(ctx context.Context) (Webhooks, error) {
	var ws Webhooks
	raw, err := c.call(ctx, http.MethodGet, "/v1/webhooks", nil, nil, &ws)
	ws.Raw = raw
	return ws, err
}

// GetWebhook reads one webhook.
func (c *Client) GetWebhook(ctx context.Context, id string) (Webhook, error) {
	var w Webhook
	raw, err := c.call(ctx, http.MethodGet, path("v1", "webhooks", id), nil, nil, &w)
	w.Raw = raw
	return w, err
}

// UpdateWebhook replaces the writable fields of the webhook in.ID.
func (c *Client) UpdateWebhook(ctx context.Context, in WebhookInput) (Webhook, error) {
	var w Webhook
	raw, err := c.call(ctx, http.MethodPut, path("v1", "webhooks", in.ID), nil, in, &w)
	if err != nil {
		return w, err
	}
	w.Raw = raw
	if w.ID == "" {
		w = Webhook{ID: in.ID, EventTypes: in.EventTypes, EndpointURL: in.EndpointURL, Description: in.Description, Raw: raw}
	}
	return w, nil
}

// DeleteWebhook deletes a webhook and its conversations.
func (c *Client) DeleteWebhook(ctx context.Context, id string) error {
	_, err := c.call(ctx, http.MethodDelete, path("v1", "webhooks", id), nil, nil, nil)
	return err
}

// Secret is a webhook's signing secret.
type Secret struct {
	ID     string          `json:"id"`
	Secret string          `json:"secret"`
	Raw    json.RawMessage `json:"-"`
}

// WebhookSecret reads a webhook's signing secret.
func (c *Client) WebhookSecret(ctx context.Context, id string) (Secret, error) {
	var s Secret
	raw, err := c.call(ctx, http.MethodGet, path("v1", "webhooks", id, "secret"), nil, nil, &s)
	s.Raw = raw
	return s, err
}

// Conversation is one delivery attempt as the service kept it. The detail
// record fills EndpointURL, RequestBody and ResponseBody too.
type Conversation struct {
	ID               string          `json:"id"`
	WebhookID        string          `json:"webhook_id"`
	CreatedAt        string          `json:"created_at"`
	HTTPStatus       int             `json:"http_status"`
	ResponseDuration *int64          `json:"response_duration"`
	Error            any             `json:"error"`
	Status           string          `json:"status"`
	EndpointURL      string          `json:"endpoint_url,omitempty"`
	RequestBody      json.RawMessage `json:"request_body,omitempty"`
	ResponseBody     string          `json:"response_body,omitempty"`
	Raw              json.RawMessage `json:"-"`
}

// Conversations is the list answer, newest first.
type Conversations struct {
	Items []Conversation  `json:"items"`
	Raw   json.RawMessage `json:"-"`
}

// ListConversations lists a webhook's conversations, newest first.
func (c *Client) ListConversations(ctx context.Context, webhookID string) (Conversations, error) {
	var cs Conversations
	raw, err := c.call(ctx, http.MethodGet, path("v1", "webhooks", webhookID, "conversations"), nil, nil, &cs)
	cs.Raw = raw
	return cs, err
}

// GetConversation reads one conversation in full.
func (c *Client) GetConversation(ctx context.Context, webhookID, id string) (Conversation, error) {
	var cv Conversation
	raw, err := c.call(ctx, http.MethodGet, path("v1", "webhooks", webhookID, "conversations", id), nil, nil, &cv)
	cv.Raw = raw
	return cv, err
}

// Triggered is the trigger's answer.
type Triggered struct {
	EventType string `json:"event_type"`
	Webhooks  *int   `json:"webhooks"`
	// Deliveries is how many deliveries of a scenario each webhook gets;
	// nil when the service did not play the scenario (only devhook
	// emulate does).
	Deliveries *int            `json:"deliveries"`
	Raw        json.RawMessage `json:"-"`
}

// Trigger sends an event of the type to the account's webhooks; "" means
// run.status.
func (c *Client) Trigger(ctx context.Context, eventType string) (Triggered, error) {
	if eventType == "" {
		eventType = EventRunStatus
	}
	var t Triggered
	raw, err := c.call(ctx, http.MethodPost, "/v1/events/trigger", nil, map[string]string{"event_type": eventType}, &t)
	t.Raw = raw
	return t, err
}

// TriggerScenario asks the service to send a scenario's deliveries (the
// file's bytes, as devhook scenario save writes them) to the account's
// webhooks, each offset_ms divided by speed after the first (nil: 1; 0:
// no waiting). This is a devhook emulate extension of the trigger
// (docs/SCENARIOS.md): the service itself ignores the scenario and sends
// a sample event, and its answer has no Deliveries.
func (c *Client) TriggerScenario(ctx context.Context, scenario []byte, speed *float64) (Triggered, error) {
	in := struct {
		EventType string          `json:"event_type"`
		Scenario  json.RawMessage `json:"scenario"`
		Speed     *float64        `json:"speed,omitempty"`
	}{EventRunStatus, json.RawMessage(scenario), speed}
	var t Triggered
	raw, err := c.call(ctx, http.MethodPost, "/v1/events/trigger", nil, in, &t)
	t.Raw = raw
	return t, err
}
